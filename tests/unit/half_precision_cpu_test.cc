// FP16 and BF16 on the CPU backend's variants, per Part 3 of the contract:
// every op at odd shapes against a float64 reference of the 16-bit inputs
// (within the output dtype's tolerance), MatMul and Reduce also with a
// float32 output, exact results where float32 accumulation is exact,
// overflow to infinity, subnormals and NaN, and the refusals.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "gtest/gtest.h"
#include "support/test_util.h"

namespace gpucompute::kernels {
namespace {

constexpr DType kHalfTypes[] = {DType::kFloat16, DType::kBFloat16};

// 16-bit bits of `v` rounded to `dtype`.
uint16_t Bits(DType dtype, float v) {
  return dtype == DType::kFloat16 ? ToFloat16(v).bits : ToBFloat16(v).bits;
}
float Value(DType dtype, uint16_t bits) {
  return dtype == DType::kFloat16 ? ToFloat(Float16{bits}) : ToFloat(BFloat16{bits});
}

std::vector<uint16_t> Random(DType dtype, int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> out(n);
  for (uint16_t& v : out) v = Bits(dtype, dist(rng));
  return out;
}

// The variant's output bytes for `p` on inputs a and b (outputs poisoned with
// NaN first), or a failed status.
absl::StatusOr<std::vector<char>> RunCpu(const Problem& p, const void* a, const void* b) {
  const Variant* v = DefaultRegistry().Find(p.op, Backend::kCpu, "cpu_reference");
  if (v == nullptr) return absl::NotFoundError("no cpu_reference");
  std::vector<char> out(OutputBytes(p), char(0xff));
  if (absl::Status s = v->launch(p, Buffers{a, b, out.data(), nullptr, 0}, {}); !s.ok()) return s;
  return out;
}

std::string Describe(const Problem& p, uint64_t seed) {
  return std::string(OpName(p.op)) + " " + DTypeName(p.dtype) +
         (p.float32_output ? " -> float32" : "") + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " " +
         ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis) +
         " seed=" + std::to_string(seed) + " (rerun with GPUCOMPUTE_TEST_SEED)";
}

void CheckRandom(Problem p) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(Describe(p, seed));
  std::mt19937_64 rng(seed);
  const std::vector<uint16_t> a = Random(p.dtype, InputAElements(p), rng);
  const std::vector<uint16_t> b = Random(p.dtype, InputBElements(p), rng);
  auto out = RunCpu(p, a.data(), b.data());
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<double> reference = ReferenceResult(p, a.data(), b.data());
  const CheckResult check = CheckAgainstReference(p, false, a.data(), out->data(), reference);
  EXPECT_TRUE(check.ok) << check.message;
}

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{1, 1, 1}, {17, 33, 5}, {257, 129, 1000}, {64, 64, 64}};

TEST(HalfPrecisionCpu, EveryOpShapeAndOutputWithinTolerance) {
  for (DType dtype : kHalfTypes) {
    for (const Shape& s : kShapes) {
      for (bool f32 : {false, true}) {
        CheckRandom(
            Problem{Op::kMatMul, dtype, s.m, s.n, s.k, ReduceOp::kSum, ReduceAxis::kAll, f32});
        for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kMean}) {
          for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
            CheckRandom(Problem{Op::kReduce, dtype, s.m, s.n, 1, rop, axis, f32});
          }
        }
      }
      CheckRandom(Problem{Op::kTranspose, dtype, s.m, s.n, 1});
    }
  }
}

TEST(HalfPrecisionCpu, ExactWhereFloat32AccumulationIsExact) {
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    std::mt19937_64 rng(testing::FreshSeed());
    // k = 1: each output is one product, exact in float32, rounded once.
    const Problem p{Op::kMatMul, dtype, 9, 7, 1};
    const std::vector<uint16_t> a = Random(dtype, 9, rng), b = Random(dtype, 7, rng);
    auto out = RunCpu(p, a.data(), b.data());
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 9; ++i) {
      for (int j = 0; j < 7; ++j) {
        uint16_t got;
        std::memcpy(&got, out->data() + 2 * (i * 7 + j), 2);
        EXPECT_EQ(got, Bits(dtype, Value(dtype, a[i]) * Value(dtype, b[j]))) << i << "," << j;
      }
    }
    // A sum of a few 16-bit values.
    const std::vector<uint16_t> x = {Bits(dtype, 0.5f), Bits(dtype, 0.25f), Bits(dtype, -0.125f)};
    auto sum = RunCpu(Problem{Op::kReduce, dtype, 1, 3, 1}, x.data(), nullptr);
    ASSERT_TRUE(sum.ok());
    uint16_t got;
    std::memcpy(&got, sum->data(), 2);
    EXPECT_EQ(got, Bits(dtype, 0.625f));
  }
}

TEST(HalfPrecisionCpu, OverflowIsInfinityUnlessTheOutputIsFloat32) {
  // 300 * 300 = 90000 > 65504: +inf in FP16, finite in float32.
  const std::vector<uint16_t> a = {Bits(DType::kFloat16, 300)}, b = {Bits(DType::kFloat16, -300)};
  auto c = RunCpu(Problem{Op::kMatMul, DType::kFloat16, 1, 1, 1}, a.data(), b.data());
  ASSERT_TRUE(c.ok());
  uint16_t half;
  std::memcpy(&half, c->data(), 2);
  EXPECT_EQ(half, 0xfc00);  // -inf
  Problem wide{Op::kMatMul, DType::kFloat16, 1, 1, 1};
  wide.float32_output = true;
  auto c32 = RunCpu(wide, a.data(), b.data());
  ASSERT_TRUE(c32.ok());
  float f;
  std::memcpy(&f, c32->data(), 4);
  EXPECT_EQ(f, -90000.0f);
  // A sum beyond 65504 likewise.
  const std::vector<uint16_t> x(4, Bits(DType::kFloat16, 60000));
  auto sum = RunCpu(Problem{Op::kReduce, DType::kFloat16, 2, 2, 1}, x.data(), nullptr);
  ASSERT_TRUE(sum.ok());
  std::memcpy(&half, sum->data(), 2);
  EXPECT_EQ(half, 0x7c00);
  // BF16 holds it: its range is float32's.
  const std::vector<uint16_t> y(4, Bits(DType::kBFloat16, 60000));
  auto bsum = RunCpu(Problem{Op::kReduce, DType::kBFloat16, 2, 2, 1}, y.data(), nullptr);
  ASSERT_TRUE(bsum.ok());
  std::memcpy(&half, bsum->data(), 2);
  EXPECT_EQ(Value(DType::kBFloat16, half), 4 * Value(DType::kBFloat16, y[0]));  // exact
}

TEST(HalfPrecisionCpu, TransposeMovesEveryBitPatternUnchanged) {
  // All 65536 patterns (zeros of both signs, subnormals, infinities, NaNs).
  std::vector<uint16_t> in(1 << 16);
  for (uint32_t i = 0; i < in.size(); ++i) in[i] = uint16_t(i);
  for (DType dtype : kHalfTypes) {
    const Problem p{Op::kTranspose, dtype, 256, 256, 1};
    auto out = RunCpu(p, in.data(), nullptr);
    ASSERT_TRUE(out.ok());
    for (int r = 0; r < 256; ++r) {
      for (int c = 0; c < 256; ++c) {
        uint16_t got;
        std::memcpy(&got, out->data() + 2 * (c * 256 + r), 2);
        ASSERT_EQ(got, in[r * 256 + c]) << DTypeName(dtype) << " " << r << "," << c;
      }
    }
  }
}

TEST(HalfPrecisionCpu, NaNPropagatesThroughEveryOp) {
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    const uint16_t nan = dtype == DType::kFloat16 ? 0x7e00 : 0x7fc0;
    std::vector<uint16_t> x = {Bits(dtype, 1), nan, Bits(dtype, -2), Bits(dtype, 3)};
    for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kMean}) {
      auto out = RunCpu(Problem{Op::kReduce, dtype, 1, 4, 1, rop}, x.data(), nullptr);
      ASSERT_TRUE(out.ok());
      uint16_t got;
      std::memcpy(&got, out->data(), 2);
      EXPECT_TRUE(std::isnan(Value(dtype, got))) << ReduceOpName(rop);
    }
    // a (1x4) @ b (4x1) with a NaN in a.
    const std::vector<uint16_t> b(4, Bits(dtype, 1));
    auto c = RunCpu(Problem{Op::kMatMul, dtype, 1, 1, 4}, x.data(), b.data());
    ASSERT_TRUE(c.ok());
    uint16_t got;
    std::memcpy(&got, c->data(), 2);
    EXPECT_TRUE(std::isnan(Value(dtype, got)));
  }
}

TEST(HalfPrecisionCpu, RefusesAFloat32OutputWhereTheContractHasNone) {
  const std::vector<uint16_t> x(4, 0);
  Problem t{Op::kTranspose, DType::kFloat16, 2, 2, 1};
  t.float32_output = true;
  auto out = RunCpu(t, x.data(), nullptr);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("float32 output"), std::string::npos) << out.status();
  const std::vector<float> y(4, 1.0f);
  Problem f{Op::kReduce, DType::kFloat32, 2, 2, 1};
  f.float32_output = true;
  EXPECT_FALSE(RunCpu(f, y.data(), nullptr).ok());
}

}  // namespace
}  // namespace gpucompute::kernels
