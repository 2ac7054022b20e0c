// FP16 and BF16 through every CUDA Transpose and Reduce variant that lists
// them: transposes bit for bit against the CPU variant (every 16-bit pattern,
// -0, infinities, subnormals and NaN included), reductions against the
// float64 reference within the contract (docs/contract.md), with both output
// choices, plus exact cases: sums of a few 16-bit values, the FP16 range
// limit, MIN/MAX NaN propagation. Skips without a GPU. Fresh random data each
// run; the seed is printed on failure.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/ladder.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

constexpr DType kHalfTypes[] = {DType::kFloat16, DType::kBFloat16};

struct Shape {
  int64_t m, n;
};
// 1x1, odd shapes (the scalar paths: no 2x2 blocks, no whole 16-byte
// vectors), even ones (the pair and vector paths, with partial tiles), long
// rows and long columns.
constexpr Shape kShapes[] = {{1, 1},     {2, 2},       {17, 33},    {257, 129}, {64, 64},
                             {130, 258}, {1000, 1002}, {999, 1001}, {3, 4100},  {4100, 3}};

using Bits = std::vector<uint16_t>;

uint16_t ToBits(DType dtype, double v) {
  return dtype == DType::kFloat16 ? ToFloat16(float(v)).bits : ToBFloat16(float(v)).bits;
}
double FromBits(DType dtype, uint16_t b) {
  return dtype == DType::kFloat16 ? ToFloat(Float16{b}) : ToFloat(BFloat16{b});
}
bool IsNaN(DType dtype, uint16_t b) { return std::isnan(FromBits(dtype, b)); }

Bits RandomBits(DType dtype, int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Bits out(static_cast<size_t>(count));
  for (uint16_t& b : out) b = ToBits(dtype, dist(rng));
  return out;
}

std::string Name(const Problem& p) {
  std::string s =
      std::string(DTypeName(p.dtype)) + " " + std::to_string(p.m) + "x" + std::to_string(p.n);
  if (p.op == Op::kReduce) {
    s += std::string(" ") + ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis) +
         (p.float32_output ? " -> float32" : "");
  }
  return s;
}

class HalfTest : public testing::CudaSuite<HalfTest> {
 protected:
  // Runs `v` on `a` (placed `a_offset` bytes into its allocation) with the
  // output (every byte `poison`) and workspace (NaN) poisoned; the output's
  // bytes, or the launch's status when it fails.
  absl::StatusOr<std::vector<char>> Run(const Variant& v, const Problem& p, const Bits& a,
                                        size_t a_offset = 0, int poison = 0xFF) {
    const size_t a_bytes = a.size() * 2, out_bytes = size_t(OutputBytes(p));
    const size_t ws_bytes = v.WorkspaceBytes(p);
    void *da = nullptr, *dout = nullptr, *dws = nullptr;
    EXPECT_EQ(cudaMalloc(&da, a_bytes + a_offset + 1), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dout, out_bytes), cudaSuccess);
    if (ws_bytes > 0) {
      EXPECT_EQ(cudaMalloc(&dws, ws_bytes), cudaSuccess);
    }
    char* a_at = static_cast<char*>(da) + a_offset;
    cudaMemcpyAsync(a_at, a.data(), a_bytes, cudaMemcpyHostToDevice, stream_);
    cudaMemsetAsync(dout, poison, out_bytes, stream_);
    if (ws_bytes > 0) cudaMemsetAsync(dws, 0xFF, ws_bytes, stream_);
    Buffers buf;
    buf.a = a_at;
    buf.out = dout;
    buf.workspace = dws;
    buf.workspace_bytes = ws_bytes;
    LaunchContext ctx;
    ctx.stream = stream_;
    ctx.cublas = cublas_;
    absl::Status status = v.launch(p, buf, ctx);
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    std::vector<char> out(out_bytes);
    cudaMemcpy(out.data(), dout, out_bytes, cudaMemcpyDeviceToHost);
    cudaFree(da);
    cudaFree(dout);
    cudaFree(dws);
    if (!status.ok()) return status;
    return out;
  }

  static std::vector<const Variant*> CudaVariants(Op op, DType dtype) {
    std::vector<const Variant*> out;
    for (const Variant* v : DefaultRegistry().List(op, Backend::kCuda))
      if (v->Supports(dtype)) out.push_back(v);
    return out;
  }
};

// ---- Transpose ----

// The CPU ladder's transpose of `a`, as bits.
Bits CpuTranspose(const Problem& p, const Bits& a) {
  for (const Variant* v : DefaultRegistry().List(Op::kTranspose, Backend::kCpu)) {
    if (!v->Supports(p.dtype)) continue;
    Bits out(a.size());
    Buffers buf;
    buf.a = a.data();
    buf.out = out.data();
    const absl::Status s = v->launch(p, buf, LaunchContext{});
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  ADD_FAILURE() << "no CPU transpose takes " << DTypeName(p.dtype);
  return {};
}

// Exact bits, except that a NaN may come out as another NaN (the contract
// lets a payload change; the hand-written kernels keep it anyway).
void ExpectSameBits(DType dtype, const Bits& want, const std::vector<char>& got_bytes) {
  ASSERT_EQ(got_bytes.size(), want.size() * 2);
  Bits got(want.size());
  std::memcpy(got.data(), got_bytes.data(), got_bytes.size());
  if (std::memcmp(got.data(), want.data(), got_bytes.size()) == 0) return;
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (got[i] == want[i] || (IsNaN(dtype, want[i]) && IsNaN(dtype, got[i]))) continue;
    ++bad;
    ADD_FAILURE() << "element " << i << ": got 0x" << std::hex << got[i] << ", want 0x" << want[i];
  }
}

// Special values of both types, and subnormals of each.
std::vector<uint16_t> Specials(DType dtype) {
  if (dtype == DType::kFloat16)
    return {0x0000, 0x8000, 0x7c00, 0xfc00, 0x0001, 0x8001, 0x03ff, 0x7bff, 0x7e00, 0x7c01, 0xffff};
  return {0x0000, 0x8000, 0x7f80, 0xff80, 0x0001, 0x8001, 0x007f, 0x7f7f, 0x7fc0, 0x7f81, 0xffff};
}

TEST_F(HalfTest, TransposeEveryVariantMatchesTheCpuBitForBit) {
  std::mt19937_64 rng(seed_ + 1);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : kHalfTypes) {
    const std::vector<uint16_t> specials = Specials(dtype);
    for (const Shape& s : kShapes) {
      Problem p;
      p.op = Op::kTranspose;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      Bits a = RandomBits(dtype, s.m * s.n, rng);
      std::uniform_int_distribution<int64_t> at(0, s.m * s.n - 1);
      for (int i = 0; i < 64; ++i) a[at(rng)] = specials[size_t(i) % specials.size()];
      const Bits want = CpuTranspose(p, a);
      const std::vector<double> reference = ReferenceResult(p, a.data(), nullptr);
      // At +2 bytes the input is not 4-byte aligned: the scalar paths.
      for (size_t offset : {size_t(0), size_t(2)}) {
        for (const Variant* v : CudaVariants(Op::kTranspose, dtype)) {
          SCOPED_TRACE("variant " + v->name + ", " + Name(p) + " at +" + std::to_string(offset));
          const auto out = Run(*v, p, a, offset);
          ASSERT_TRUE(out.ok()) << out.status();
          ExpectSameBits(dtype, want, *out);
          const CheckResult check =
              CheckAgainstReference(p, false, a.data(), out->data(), reference);
          EXPECT_TRUE(check.ok) << check.message;
        }
      }
    }
  }
}

// Every 16-bit pattern once: 256x256 (the pair and vector paths) and the
// first 255x257 (odd: the scalar paths).
TEST_F(HalfTest, TransposeEveryBitPattern) {
  for (DType dtype : kHalfTypes) {
    for (const Shape& s : {Shape{256, 256}, Shape{255, 257}}) {
      Problem p;
      p.op = Op::kTranspose;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      Bits a(size_t(s.m * s.n));
      for (size_t i = 0; i < a.size(); ++i) a[i] = uint16_t(i);
      Bits want(a.size());
      for (int64_t r = 0; r < s.m; ++r)
        for (int64_t c = 0; c < s.n; ++c) want[c * s.m + r] = a[r * s.n + c];
      EXPECT_EQ(CpuTranspose(p, a), want);
      for (const Variant* v : CudaVariants(Op::kTranspose, dtype)) {
        SCOPED_TRACE("variant " + v->name + ", " + Name(p));
        const auto out = Run(*v, p, a);
        ASSERT_TRUE(out.ok()) << out.status();
        ExpectSameBits(dtype, want, *out);
      }
    }
  }
}

// ---- Reduce ----

Problem ReduceProblem(DType dtype, Shape s, ReduceOp op, ReduceAxis axis, bool f32) {
  Problem p;
  p.op = Op::kReduce;
  p.dtype = dtype;
  p.float32_output = f32;
  p.m = s.m, p.n = s.n;
  p.reduce_op = op;
  p.reduce_axis = axis;
  return p;
}

// Output element i as a double (16-bit or float32 output).
double OutputAt(const Problem& p, const std::vector<char>& out, int64_t i) {
  if (p.float32_output) {
    float f;
    std::memcpy(&f, out.data() + i * 4, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, out.data() + i * 2, 2);
  return FromBits(p.dtype, b);
}

class HalfReduceTest : public HalfTest,
                       public ::testing::WithParamInterface<std::tuple<ReduceOp, ReduceAxis>> {};

TEST_P(HalfReduceTest, EveryVariantWithinTheContract) {
  const auto [op, axis] = GetParam();
  std::mt19937_64 rng(seed_ + 10 + int(op) * 3 + int(axis));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : kHalfTypes) {
    for (const Shape& s : kShapes) {
      const Bits a = RandomBits(dtype, s.m * s.n, rng);
      for (bool f32 : {false, true}) {
        const Problem p = ReduceProblem(dtype, s, op, axis, f32);
        const std::vector<double> reference = ReferenceResult(p, a.data(), nullptr);
        for (const Variant* v : CudaVariants(Op::kReduce, dtype)) {
          SCOPED_TRACE("variant " + v->name + ", " + Name(p));
          const auto out = Run(*v, p, a);
          ASSERT_TRUE(out.ok()) << out.status();
          const CheckResult check =
              CheckAgainstReference(p, false, a.data(), out->data(), reference);
          EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error << ")";
          // A MIN or MAX is one of the inputs: exact.
          if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
            for (size_t i = 0; i < reference.size(); ++i)
              ASSERT_EQ(OutputAt(p, *out, int64_t(i)), reference[i]) << "element " << i;
          }
          const auto again = Run(*v, p, a);
          ASSERT_TRUE(again.ok());
          EXPECT_TRUE(*again == *out) << "two launches on the same input gave different bits";
        }
      }
    }
  }
}

// At +2 bytes the input is not 16-byte aligned: the scalar loads and tails.
TEST_P(HalfReduceTest, UnalignedInput) {
  const auto [op, axis] = GetParam();
  std::mt19937_64 rng(seed_ + 30 + int(op) * 3 + int(axis));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : kHalfTypes) {
    for (const Shape& s : {Shape{33, 64}, Shape{3, 4100}, Shape{1, 1000}}) {
      const Bits a = RandomBits(dtype, s.m * s.n, rng);
      const Problem p = ReduceProblem(dtype, s, op, axis, false);
      const std::vector<double> reference = ReferenceResult(p, a.data(), nullptr);
      for (const Variant* v : CudaVariants(Op::kReduce, dtype)) {
        SCOPED_TRACE("variant " + v->name + ", " + Name(p) + " at +2 bytes");
        const auto out = Run(*v, p, a, 2);
        ASSERT_TRUE(out.ok()) << out.status();
        const CheckResult check = CheckAgainstReference(p, false, a.data(), out->data(), reference);
        EXPECT_TRUE(check.ok) << check.message;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsAndAxes, HalfReduceTest,
                         ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kMin,
                                                              ReduceOp::kMax, ReduceOp::kMean),
                                            ::testing::Values(ReduceAxis::kAll, ReduceAxis::kPerRow,
                                                              ReduceAxis::kPerColumn)),
                         [](const auto& info) {
                           return std::string(ReduceOpName(std::get<0>(info.param))) + "_" +
                                  ReduceAxisName(std::get<1>(info.param));
                         });

// Expected outputs of exact cases, checked bit for bit: `want` in float64,
// rounded once to the output type.
void ExpectExact(const Problem& p, const std::vector<char>& out, const std::vector<double>& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (p.float32_output) {
      float got;
      std::memcpy(&got, out.data() + i * 4, 4);
      const float w = float(want[i]);
      EXPECT_TRUE(std::memcmp(&got, &w, 4) == 0 || (std::isnan(got) && std::isnan(w)))
          << "element " << i << ": got " << got << ", want " << w;
    } else {
      uint16_t got;
      std::memcpy(&got, out.data() + i * 2, 2);
      const uint16_t w = ToBits(p.dtype, want[i]);
      EXPECT_TRUE(got == w || (IsNaN(p.dtype, got) && IsNaN(p.dtype, w)))
          << "element " << i << ": got " << FromBits(p.dtype, got) << " (0x" << std::hex << got
          << "), want " << FromBits(p.dtype, w) << " (0x" << w << ")";
    }
  }
}

// Sums of a few 16-bit values are exact in float: the result is the exact
// sum rounded once.
TEST_F(HalfTest, SumOfAFewValuesIsBitExact) {
  for (DType dtype : kHalfTypes) {
    // 3 x 5: row and column sums exact in float, rounding once in 16 bits.
    const double values[] = {0.5,   0.25,  1.5, -0.125, 3,  1024, 0.0009765625, -7, 2.75,
                             -0.75, 0.375, 100, 0.0625, -3, 33};
    Bits a;
    for (double v : values) a.push_back(ToBits(dtype, v));
    for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
      for (bool f32 : {false, true}) {
        const Problem p = ReduceProblem(dtype, {3, 5}, ReduceOp::kSum, axis, f32);
        const std::vector<double> want = ReferenceResult(p, a.data(), nullptr);
        for (const Variant* v : CudaVariants(Op::kReduce, dtype)) {
          SCOPED_TRACE("variant " + v->name + ", " + Name(p));
          const auto out = Run(*v, p, a);
          ASSERT_TRUE(out.ok()) << out.status();
          ExpectExact(p, *out, want);
        }
      }
    }
  }
}

// FP16's largest finite value is 65504: a sum beyond it (after rounding) is
// +-inf in FP16 and exact in float32; a MEAN or MAX of 65504s is 65504.
TEST_F(HalfTest, Fp16RangeLimit) {
  const DType dtype = DType::kFloat16;
  struct Case {
    std::string name;
    std::vector<double> values;  // 2 x 4
    ReduceOp op;
  };
  const Case cases[] = {
      {"sum to +inf", {65504, 65504, 1, 1, 60000, 6000, -1, 0}, ReduceOp::kSum},
      {"sum to -inf", {-65504, -32768, -1, 2, -60000, -6000, 1, 0}, ReduceOp::kSum},
      {"mean of 65504s", {65504, 65504, 65504, 65504, 65504, 65504, 65504, 65504}, ReduceOp::kMean},
      {"max 65504", {65504, -65504, 1, 65504, 2, 3, -4, 65504}, ReduceOp::kMax},
      {"min -65504", {65504, -65504, 1, 65504, 2, 3, -4, -65504}, ReduceOp::kMin},
  };
  for (const Case& c : cases) {
    Bits a;
    for (double v : c.values) a.push_back(ToBits(dtype, v));
    for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
      for (bool f32 : {false, true}) {
        const Problem p = ReduceProblem(dtype, Shape{2, 4}, c.op, axis, f32);
        // The float64 reference is exact here (and float32 holds it).
        const std::vector<double> want = ReferenceResult(p, a.data(), nullptr);
        for (const Variant* v : CudaVariants(Op::kReduce, dtype)) {
          SCOPED_TRACE("variant " + v->name + ", " + Name(p) + ": " + c.name);
          const auto out = Run(*v, p, a);
          ASSERT_TRUE(out.ok()) << out.status();
          ExpectExact(p, *out, want);
        }
      }
    }
    // The case's point, spelled out: ALL in FP16.
    const Problem p = ReduceProblem(dtype, {2, 4}, c.op, ReduceAxis::kAll, false);
    const double all = ReferenceResult(p, a.data(), nullptr)[0];
    if (c.name == "sum to +inf") {
      EXPECT_EQ(FromBits(dtype, ToBits(dtype, all)), INFINITY);
    }
    if (c.name == "sum to -inf") {
      EXPECT_EQ(FromBits(dtype, ToBits(dtype, all)), -INFINITY);
    }
  }
}

// MIN and MAX propagate NaN as NumPy does, wherever the NaN sits: one NaN at
// every position of small matrices in turn (every lane of an 8-value load,
// the scalar tails, row and column ends), each NaN encoding of the type.
TEST_F(HalfTest, MinMaxPropagateNaN) {
  std::mt19937_64 rng(seed_ + 50);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : kHalfTypes) {
    const uint16_t nans[] = {uint16_t(dtype == DType::kFloat16 ? 0x7e00 : 0x7fc0),
                             uint16_t(dtype == DType::kFloat16 ? 0xfc01 : 0xff81)};
    for (const Shape& s : {Shape{4, 24}, Shape{5, 19}, Shape{19, 5}}) {
      const Bits base = RandomBits(dtype, s.m * s.n, rng);
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
        for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
          for (bool f32 : {false, true}) {
            const Problem p = ReduceProblem(dtype, s, op, axis, f32);
            for (const Variant* v : CudaVariants(Op::kReduce, dtype)) {
              for (int64_t i = 0; i < s.m * s.n; ++i) {
                Bits a = base;
                a[size_t(i)] = nans[size_t(i) % 2];
                // The float64 reference propagates NaN (NumPy's rule) and
                // is exact otherwise.
                const std::vector<double> want = ReferenceResult(p, a.data(), nullptr);
                SCOPED_TRACE("variant " + v->name + ", " + Name(p) + ", NaN at " +
                             std::to_string(i));
                const auto out = Run(*v, p, a, 0, 0x41);  // finite poison
                ASSERT_TRUE(out.ok()) << out.status();
                ExpectExact(p, *out, want);
              }
            }
          }
        }
      }
    }
  }
}

// ---- dtypes a row does not list ----

// A variant whose row leaves out a dtype answers InvalidArgument for it
// before its launcher runs: here a CUDA transpose launcher behind a row that
// lists float32 only, and every registered CUDA variant (any op) without
// FP16 or BF16. A float32 output for a Transpose is refused the same way.
TEST_F(HalfTest, UnlistedDTypeIsAnErrorNotACrash) {
  const Variant* padded = DefaultRegistry().Find(Op::kTranspose, Backend::kCuda, "shared_padded");
  ASSERT_NE(padded, nullptr);
  Variant f32_only = DeclaredVariant(Op::kTranspose, Backend::kCuda, "f32_only", "test",
                                     kFloat32Only, false, 0, nullptr);
  f32_only.launch = CheckedLaunch(f32_only, padded->launch);
  Problem p;
  p.op = Op::kTranspose;
  p.m = p.n = 64;
  const Bits a(64 * 64, 0x3c00);
  for (DType dtype : kHalfTypes) {
    p.dtype = dtype;
    const auto out = Run(f32_only, p, a);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(out.status().message()).find(DTypeName(dtype)), std::string::npos)
        << out.status();
    Problem with_f32 = p;
    with_f32.float32_output = true;
    const auto refused = Run(*padded, with_f32, a);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  }
  for (const Variant* v : DefaultRegistry().List(Backend::kCuda)) {
    for (DType dtype : kHalfTypes) {
      if (v->Supports(dtype)) continue;
      Problem q;
      q.op = v->op;
      q.dtype = dtype;
      q.m = q.n = q.k = 4;
      SCOPED_TRACE("variant " + std::string(OpName(v->op)) + "/" + v->name + ", " +
                   DTypeName(dtype));
      const auto out = Run(*v, q, Bits(16, 0x3c00));
      ASSERT_FALSE(out.ok());
      EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
}  // namespace gpucompute::kernels
