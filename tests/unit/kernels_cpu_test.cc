// CPU variants against plain float64 loops written here, at odd shapes, on
// fresh random data, with outputs poisoned with NaN before each run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/ladder.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/test_util.h"

namespace gpucompute::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomValues;

struct Shape {
  int64_t m, n, k;
};

const Shape kShapes[] = {{1, 1, 1},   {1, 37, 5},    {37, 1, 5},   {33, 17, 9},
                         {17, 33, 1}, {257, 129, 65}, {64, 64, 64}, {1000, 3, 7}};

// Independent float64 loops (not the library's reference) for each op.
std::vector<double> Expected(const Problem& p, const std::vector<double>& a,
                             const std::vector<double>& b) {
  std::vector<double> out;
  if (p.op == Op::kMatMul) {
    out.assign(p.m * p.n, 0);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) s += a[i * p.k + kk] * b[kk * p.n + j];
        out[i * p.n + j] = s;
      }
  } else if (p.op == Op::kTranspose) {
    out.assign(p.m * p.n, 0);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) out[j * p.m + i] = a[i * p.n + j];
  } else {
    const int64_t groups = p.reduce_axis == ReduceAxis::kAll ? 1
                           : p.reduce_axis == ReduceAxis::kPerRow ? p.m : p.n;
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<double> xs;
      for (int64_t i = 0; i < p.m; ++i)
        for (int64_t j = 0; j < p.n; ++j) {
          const bool in = p.reduce_axis == ReduceAxis::kAll || (p.reduce_axis == ReduceAxis::kPerRow ? i == g : j == g);
          if (in) xs.push_back(a[i * p.n + j]);
        }
      double r = p.reduce_op == ReduceOp::kMin ? INFINITY : p.reduce_op == ReduceOp::kMax ? -INFINITY : 0;
      for (double x : xs) {
        if (p.reduce_op == ReduceOp::kMin) r = std::min(r, x);
        else if (p.reduce_op == ReduceOp::kMax) r = std::max(r, x);
        else r += x;
      }
      if (p.reduce_op == ReduceOp::kMean) r /= double(xs.size());
      out.push_back(r);
    }
  }
  return out;
}

template <typename T>
void RunAndCompare(const Variant& v, const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> a = RandomValues<T>(InputAElements(p), rng);
  std::vector<T> b = RandomValues<T>(InputBElements(p), rng);
  std::vector<T> out(OutputElements(p), std::numeric_limits<T>::quiet_NaN());
  ASSERT_TRUE(v.launch(p, Buffers{a.data(), b.data(), out.data(), nullptr, 0}, {}).ok());

  const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
  const std::vector<double> expected = Expected(p, a64, b64);
  // The library's reference agrees with the loops above...
  const std::vector<double> reference = ReferenceResult(p, a.data(), b.data());
  ASSERT_EQ(reference.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(reference[i], expected[i], 1e-12 * (1 + std::fabs(expected[i]))) << "element " << i;
  }
  // ...and the variant meets the contract against them.
  const CheckResult check = CheckAgainstReference(p, v.reduced_precision, a.data(), out.data(), expected);
  EXPECT_TRUE(check.ok) << check.message;
}

std::string Describe(const Problem& p, uint64_t seed) {
  return std::string(OpName(p.op)) + " " + DTypeName(p.dtype) + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " " + ReduceOpName(p.reduce_op) +
         " " + ReduceAxisName(p.reduce_axis) + " seed=" + std::to_string(seed) +
         " (rerun with GPUCOMPUTE_TEST_SEED)";
}

void CheckAllShapes(Op op, ReduceOp rop = ReduceOp::kSum, ReduceAxis axis = ReduceAxis::kAll) {
  const Variant* v = DefaultRegistry().Find(op, Backend::kCpu, "cpu_reference");
  ASSERT_NE(v, nullptr);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : kShapes) {
      Problem p{op, dtype, s.m, s.n, s.k, rop, axis};
      const uint64_t seed = FreshSeed();
      SCOPED_TRACE(Describe(p, seed));
      if (dtype == DType::kFloat32) RunAndCompare<float>(*v, p, seed);
      else RunAndCompare<double>(*v, p, seed);
    }
  }
}

TEST(CpuKernels, MatMul) { CheckAllShapes(Op::kMatMul); }
TEST(CpuKernels, Transpose) { CheckAllShapes(Op::kTranspose); }

TEST(CpuKernels, ReduceEveryOpAndAxis) {
  for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kMean}) {
    for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
      CheckAllShapes(Op::kReduce, rop, axis);
    }
  }
}

TEST(CpuKernels, LargeMatMulUsesThreadsAndStaysExact) {
  // Big enough that the row bands run on several threads.
  const Variant* v = DefaultRegistry().Find(Op::kMatMul, Backend::kCpu, "cpu_reference");
  const uint64_t seed = FreshSeed();
  Problem p{Op::kMatMul, DType::kFloat32, 301, 257, 513};
  SCOPED_TRACE(Describe(p, seed));
  RunAndCompare<float>(*v, p, seed);
}

TEST(Check, CatchesAWrongElementAndNaN) {
  Problem p{Op::kTranspose, DType::kFloat32, 2, 3, 1};
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<float> out = {1, 4, 2, 5, 3, 6};
  std::vector<double> ref(out.begin(), out.end());
  EXPECT_TRUE(CheckAgainstReference(p, false, a.data(), out.data(), ref).ok);
  out[3] = 5.0001f;
  const CheckResult wrong = CheckAgainstReference(p, false, a.data(), out.data(), ref);
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.message.find("[1,1]"), std::string::npos) << wrong.message;
  out[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CheckAgainstReference(p, false, a.data(), out.data(), ref).ok);
}

TEST(Check, MatMulToleranceScalesWithTheResult) {
  Problem p{Op::kMatMul, DType::kFloat32, 1, 1, 1};
  float a = 1, out = 1000.05f;
  EXPECT_TRUE(CheckAgainstReference(p, false, &a, &out, {1000.0}).ok);   // 5e-5 relative
  out = 1000.5f;
  EXPECT_FALSE(CheckAgainstReference(p, false, &a, &out, {1000.0}).ok);  // 5e-4 relative
}

TEST(Registry, RejectsDuplicatesAndListsInOrder) {
  Registry r;
  Variant v;
  v.name = "x";
  v.dtypes = {DType::kFloat32};
  v.launch = [](const Problem&, const Buffers&, const LaunchContext&) { return absl::OkStatus(); };
  EXPECT_TRUE(r.Add(v).ok());
  EXPECT_FALSE(r.Add(v).ok());
  v.name = "y";
  EXPECT_TRUE(r.Add(v).ok());
  auto list = r.List(Op::kMatMul, Backend::kCpu);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "x");
  EXPECT_EQ(r.Find(Op::kMatMul, Backend::kCuda, "x"), nullptr);
}

TEST(Registry, RejectsVariantsWithoutLauncherNameOrElementType) {
  Registry r;
  Variant v;
  v.name = "x";
  v.dtypes = {DType::kFloat32};
  const absl::Status no_launcher = r.Add(v);
  EXPECT_EQ(no_launcher.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_launcher.message().find("matmul/x has no launcher"), std::string::npos)
      << no_launcher;
  v.launch = [](const Problem&, const Buffers&, const LaunchContext&) { return absl::OkStatus(); };
  v.dtypes.clear();
  EXPECT_FALSE(r.Add(v).ok());
  v.dtypes = {DType::kFloat32};
  v.name.clear();
  EXPECT_FALSE(r.Add(v).ok());
  EXPECT_TRUE(r.List(Backend::kCpu).empty());
}

absl::Status Succeed(const Problem&, const Buffers&) { return absl::OkStatus(); }

TEST(Ladder, BrokenTablesAreErrors) {
  constexpr LadderRow<CpuLaunch> kDuplicate[] = {
      {.name = "a", .description = "first", .dtypes = kFloat32Only, .launch = Succeed},
      {.name = "a", .description = "again", .dtypes = kFloat32Only, .launch = Succeed},
  };
  Registry dup;
  const absl::Status twice = AddCpuLadder(dup, Op::kMatMul, kDuplicate);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists) << twice;
  EXPECT_NE(twice.message().find("matmul/a"), std::string::npos) << twice;

  constexpr LadderRow<CpuLaunch> kNoLauncher[] = {
      {.name = "b", .description = "no launcher", .dtypes = kFloat32AndFloat64},
  };
  Registry none;
  const absl::Status missing = AddCpuLadder(none, Op::kReduce, kNoLauncher);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
  EXPECT_NE(missing.message().find("reduce/b has no launcher"), std::string::npos) << missing;
}

TEST(Ladder, RowsBecomeCheckedVariantsInOrder) {
  constexpr LadderRow<CpuLaunch> kRows[] = {
      {.name = "simple", .description = "d1", .dtypes = kFloat32AndFloat64, .launch = Succeed},
      {.name = "fast",
       .description = "d2",
       .dtypes = kFloat32Only,
       .reduced_precision = true,
       .fallback_rank = 1,
       .workspace_bytes = [](const Problem& p) { return size_t(p.m) * 8; },
       .launch = Succeed},
  };
  Registry r;
  ASSERT_TRUE(AddCpuLadder(r, Op::kTranspose, kRows).ok());
  const auto list = r.List(Op::kTranspose, Backend::kCpu);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "simple");
  EXPECT_EQ(list[0]->dtypes, (std::vector<DType>{DType::kFloat32, DType::kFloat64}));
  EXPECT_EQ(list[0]->fallback_rank, 0);
  const Variant& fast = *list[1];
  EXPECT_EQ(fast.description, "d2");
  EXPECT_TRUE(fast.reduced_precision);
  EXPECT_EQ(fast.fallback_rank, 1);
  Problem p{Op::kTranspose, DType::kFloat32, 4, 3, 1};
  EXPECT_EQ(fast.WorkspaceBytes(p), 32u);
  std::vector<char> workspace(32);
  Buffers buf;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);  // no workspace
  buf.workspace = workspace.data();
  buf.workspace_bytes = workspace.size();
  EXPECT_TRUE(fast.launch(p, buf, {}).ok());
  p.dtype = DType::kFloat64;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);
  p.dtype = DType::kFloat32;
  p.op = Op::kMatMul;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Registry, DefaultRegistryLoadsEveryLadder) {
  const absl::StatusOr<const Registry*> loaded = LoadDefaultRegistry();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, &DefaultRegistry());
  for (Op op : {Op::kMatMul, Op::kTranspose, Op::kReduce}) {
    const auto cpu = (*loaded)->List(op, Backend::kCpu);
    ASSERT_EQ(cpu.size(), 1u) << OpName(op);
    EXPECT_EQ(cpu[0]->name, "cpu_reference");
    EXPECT_GT(cpu[0]->fallback_rank, 0);
    EXPECT_EQ((*loaded)->List(op, Backend::kCuda).empty(), !BuiltWithCuda()) << OpName(op);
  }
}

}  // namespace
}  // namespace gpucompute::kernels
