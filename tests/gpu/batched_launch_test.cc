// Every CUDA variant with a batched form (Variant::launch_batch), each dtype
// it takes (and for Reduce each axis): members of one problem, each on its own buffers, launched as
// one. Each member's result must be bit for bit what the variant writes for
// it alone, and within tolerance of the CPU reference, on fresh random data
// at odd shapes with poisoned outputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

// Uniform values in [-1, 1) as `dtype`.
std::vector<char> RandomMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::vector<char> bytes(size_t(elements * ElementSize(dtype)));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < elements; ++i) {
    const float v = dist(rng);
    char* at = bytes.data() + i * ElementSize(dtype);
    switch (dtype) {
      case DType::kFloat32: std::memcpy(at, &v, 4); break;
      case DType::kFloat64: {
        const double d = v;
        std::memcpy(at, &d, 8);
        break;
      }
      case DType::kFloat16: {
        const Float16 h = ToFloat16(v);
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::kBFloat16: {
        const BFloat16 h = ToBFloat16(v);
        std::memcpy(at, &h, 2);
        break;
      }
    }
  }
  return bytes;
}

// One member: its inputs on the host and its buffers on the device; `a`
// starts `a_offset` bytes into its allocation (not 16-byte aligned when
// that is one element).
struct Member {
  std::vector<char> a, b;
  size_t a_offset = 0;
  std::unique_ptr<DeviceBuffer> da, db, dout;
  char* a_at() const { return static_cast<char*>(da->get()) + a_offset; }
};

class BatchedLaunchTest : public testing::CudaSuite<BatchedLaunchTest> {
 protected:
  std::vector<Member> MakeMembers(const Problem& p, int count, bool one_misaligned,
                                  std::mt19937_64& rng) {
    std::vector<Member> members(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
      Member& x = members[size_t(i)];
      x.a = RandomMatrix(p.dtype, InputAElements(p), rng);
      if (p.op == Op::kMatMul) x.b = RandomMatrix(p.dtype, InputBElements(p), rng);
      x.a_offset = one_misaligned && i == count / 2 ? size_t(ElementSize(p.dtype)) : 0;
      x.da = std::make_unique<DeviceBuffer>(x.a.size() + x.a_offset);
      x.db = std::make_unique<DeviceBuffer>(x.b.size());
      x.dout = std::make_unique<DeviceBuffer>(size_t(OutputBytes(p)));
      EXPECT_EQ(cudaMemcpy(x.a_at(), x.a.data(), x.a.size(), cudaMemcpyHostToDevice), cudaSuccess);
      if (!x.b.empty()) {
        EXPECT_EQ(cudaMemcpy(x.db->get(), x.b.data(), x.b.size(), cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
    return members;
  }

  // Every member's output, poisoned (all-ones bytes: NaN) before `launch`.
  template <typename Launch>
  std::vector<std::vector<char>> Run(const Problem& p, std::vector<Member>& members,
                                     const Launch& launch) {
    const size_t out_bytes = size_t(OutputBytes(p));
    for (Member& x : members) {
      EXPECT_EQ(cudaMemsetAsync(x.dout->get(), 0xFF, out_bytes, stream_), cudaSuccess);
    }
    launch();
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<std::vector<char>> outs;
    for (Member& x : members) {
      std::vector<char> out(out_bytes);
      EXPECT_EQ(cudaMemcpy(out.data(), x.dout->get(), out_bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      outs.push_back(std::move(out));
    }
    return outs;
  }

  // `count` members of `p` through `v`'s batched form and one by one.
  // Returns whether the batched form took them.
  bool Check(const Variant& v, const Problem& p, int count, bool one_misaligned,
             std::mt19937_64& rng) {
    std::vector<Member> members = MakeMembers(p, count, one_misaligned, rng);
    std::vector<Buffers> buffers;
    for (const Member& x : members) {
      buffers.push_back({x.a_at(), x.b.empty() ? nullptr : x.db->get(), x.dout->get()});
    }
    LaunchContext ctx;
    ctx.stream = stream_;
    absl::StatusOr<bool> taken;
    const auto batched = Run(p, members, [&] { taken = v.launch_batch(p, buffers, ctx); });
    EXPECT_TRUE(taken.ok()) << taken.status();
    if (!taken.ok()) return false;
    // Alone, each member has the workspace a launch of it needs (a batched
    // form takes only problems that need none); they run one after another
    // on one stream, so they share it.
    const DeviceBuffer workspace(v.WorkspaceBytes(p));
    const auto alone = Run(p, members, [&] {
      for (Buffers buf : buffers) {
        buf.workspace = workspace.get();
        buf.workspace_bytes = workspace.bytes();
        EXPECT_TRUE(v.launch(p, buf, ctx).ok());
      }
    });
    for (int i = 0; i < count; ++i) {
      SCOPED_TRACE("member " + std::to_string(i));
      if (!*taken) {
        // Nothing was enqueued: the outputs hold the poison still.
        EXPECT_TRUE(batched[size_t(i)] == std::vector<char>(batched[size_t(i)].size(), char(0xFF)));
        continue;
      }
      EXPECT_TRUE(batched[size_t(i)] == alone[size_t(i)]) << "differs from the member alone";
      const Member& x = members[size_t(i)];
      const std::vector<double> reference =
          ReferenceResult(p, x.a.data(), x.b.empty() ? nullptr : x.b.data());
      const CheckResult check = CheckAgainstReference(p, v.reduced_precision, x.a.data(),
                                                      batched[size_t(i)].data(), reference);
      EXPECT_TRUE(check.ok) << check.message;
    }
    return *taken;
  }
};

std::string Describe(const Variant& v, const Problem& p) {
  return std::string(OpName(p.op)) + "/" + v.name + " " + DTypeName(p.dtype) +
         (p.float32_output ? "->float32" : "") + " " + std::to_string(p.m) + "x" +
         std::to_string(p.n) + (p.op == Op::kMatMul ? "x" + std::to_string(p.k) : "") +
         (p.op == Op::kReduce
              ? std::string(" ") + ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis)
              : "");
}

struct Shape {
  int64_t m, n, k;
};

// The problems each op's batched forms are checked on: odd shapes, and for
// Reduce each axis with an op of each kind (a sum, a mean, a max).
std::vector<Problem> ProblemsOf(Op op, DType dtype) {
  const Shape matmul_shapes[] = {{1, 1, 1}, {37, 23, 41}, {64, 64, 64}, {130, 129, 131}};
  const Shape transpose_shapes[] = {
      {1, 1, 0}, {31, 33, 0}, {64, 64, 0}, {100, 4, 0}, {257, 130, 0}};
  // Rows x columns: small (one pass), a long row (a block a row), many rows
  // and columns (two passes for ALL and PER_COLUMN: no one launch).
  const Shape reduce_shapes[] = {{1, 1, 0}, {37, 19, 0}, {3, 1500, 0}, {64, 64, 0}, {300, 131, 0}};
  std::vector<Problem> out;
  const auto add = [&](const Shape& s, ReduceOp reduce_op, ReduceAxis axis) {
    Problem p;
    p.op = op;
    p.dtype = dtype;
    p.m = s.m, p.n = s.n, p.k = s.k;
    p.reduce_op = reduce_op;
    p.reduce_axis = axis;
    out.push_back(p);
  };
  switch (op) {
    case Op::kMatMul:
      for (const Shape& s : matmul_shapes) add(s, ReduceOp::kSum, ReduceAxis::kAll);
      break;
    case Op::kTranspose:
      for (const Shape& s : transpose_shapes) add(s, ReduceOp::kSum, ReduceAxis::kAll);
      break;
    case Op::kReduce:
      for (const Shape& s : reduce_shapes) {
        add(s, ReduceOp::kSum, ReduceAxis::kAll);
        add(s, ReduceOp::kMean, ReduceAxis::kPerRow);
        add(s, ReduceOp::kMax, ReduceAxis::kPerColumn);
      }
      break;
  }
  return out;
}

TEST_F(BatchedLaunchTest, EveryMemberEqualsItsLaunchAloneBitForBit) {
  std::mt19937_64 rng(seed_);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  int batched_variants = 0, reduce_taken = 0, reduce_declined = 0;
  for (Op op : {Op::kMatMul, Op::kTranspose, Op::kReduce}) {
    for (const Variant* v : DefaultRegistry().List(op, Backend::kCuda)) {
      if (!v->launch_batch) continue;
      EXPECT_GT(v->max_batch_members, 1) << v->name;
      ++batched_variants;
      for (DType dtype : v->dtypes) {
        for (Problem p : ProblemsOf(op, dtype)) {
          SCOPED_TRACE(Describe(*v, p));
          // Aligned members: a one-launch form takes every MatMul; the
          // Transposes except of 16-bit elements (their pair kernels have
          // none); the Reduces that need no workspace (one pass).
          const bool taken = Check(*v, p, 5, /*one_misaligned=*/false, rng);
          if (op == Op::kReduce) {
            EXPECT_EQ(taken, v->WorkspaceBytes(p) == 0);
            ++(taken ? reduce_taken : reduce_declined);
          } else {
            EXPECT_EQ(taken, !(op == Op::kTranspose && IsHalfPrecision(dtype)));
          }
          // One member off 16-byte alignment: taken or not, never wrong.
          Check(*v, p, 3, /*one_misaligned=*/true, rng);
          if (op != Op::kTranspose && IsHalfPrecision(dtype)) {
            p.float32_output = true;
            SCOPED_TRACE("float32 output");
            EXPECT_EQ(Check(*v, p, 4, false, rng), op == Op::kMatMul || v->WorkspaceBytes(p) == 0);
          }
        }
      }
      // The most one launch takes, and one more refused.
      Problem p;
      p.op = op;
      p.dtype = DType::kFloat32;
      p.m = 33, p.n = 17, p.k = 9;
      EXPECT_TRUE(Check(*v, p, v->max_batch_members, false, rng)) << v->name;
      std::vector<Buffers> too_many(size_t(v->max_batch_members + 1));
      LaunchContext ctx;
      ctx.stream = stream_;
      const absl::StatusOr<bool> refused = v->launch_batch(p, too_many, ctx);
      EXPECT_FALSE(refused.ok()) << v->name;
    }
  }
  // MatMul: naive, tiled16, tiled32, tiled32_padded, register_tiled;
  // Transpose: naive and the five tiled kernels; Reduce: warp_shuffle.
  EXPECT_GE(batched_variants, 12);
  // Both sides of the Reduce form's line were crossed.
  EXPECT_GT(reduce_taken, 0);
  EXPECT_GT(reduce_declined, 0);
}

}  // namespace
}  // namespace gpucompute::kernels
