// The dtype table (kernels/include/gpucompute/kernels/dtype.h) against the
// wire contract, and the host 16-bit conversions (half.h) against exact
// arithmetic: every FP16 and BF16 value round-trips, and rounding from float
// is to nearest, ties to even, with overflow to infinity.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "gpucompute/kernels/dtype.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/v1/compute.pb.h"
#include "gtest/gtest.h"
#include "support/test_util.h"

namespace gpucompute::kernels {
namespace {

namespace v1 = gpucompute::v1;

std::string Upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

TEST(DTypeTable, EveryProtoDTypeHasOneEntryOfTheSameName) {
  const auto* e = v1::DType_descriptor();
  for (int i = 0; i < e->value_count(); ++i) {
    const int number = e->value(i)->number();
    if (number == v1::DTYPE_UNSPECIFIED) continue;
    DType d;
    ASSERT_TRUE(DTypeFromProtoValue(number, &d)) << e->value(i)->name() << " has no table entry";
    EXPECT_EQ("DTYPE_" + Upper(DTypeName(d)), e->value(i)->name());
  }
  std::string names;
  for (DType d : kAllDTypes) {
    const DTypeInfo info = Describe(d);
    EXPECT_EQ(info.dtype, d);
    EXPECT_TRUE(v1::DType_IsValid(info.proto_value)) << info.name;
    EXPECT_GT(info.size, 0) << info.name;
    EXPECT_GT(info.matmul_tolerance, 0) << info.name;
    DType back;
    ASSERT_TRUE(DTypeFromName(info.name, &back));
    EXPECT_EQ(back, d);
    names += names.empty() ? info.name : std::string(", ") + info.name;
  }
  EXPECT_EQ(names, kDTypeNames);
  EXPECT_EQ(std::size(kAllDTypes), size_t(e->value_count() - 1));
}

TEST(DTypeTable, SixteenBitTypesAccumulateInFloat32) {
  for (DType d : kAllDTypes) {
    const DTypeInfo info = Describe(d);
    EXPECT_EQ(info.accumulator, IsHalfPrecision(d) ? DType::kFloat32 : d) << info.name;
  }
  EXPECT_EQ(Describe(DType::kFloat16).max_finite, 65504.0);
  EXPECT_EQ(ToFloat(BFloat16{0x7f7f}), float(Describe(DType::kBFloat16).max_finite));
}

TEST(HalfConversions, EveryFloat16AndBFloat16RoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float f = ToFloat(Float16{uint16_t(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(f)))) << bits;
    } else {
      EXPECT_EQ(ToFloat16(f).bits, bits) << "fp16 " << bits;
    }
    const float g = ToFloat(BFloat16{uint16_t(bits)});
    if (std::isnan(g)) {
      EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(g)))) << bits;
    } else {
      EXPECT_EQ(ToBFloat16(g).bits, bits) << "bf16 " << bits;
    }
  }
  EXPECT_EQ(ToFloat(Float16{0x0001}), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(ToFloat(Float16{0x7bff}), 65504.0f);
  EXPECT_EQ(ToFloat(Float16{0x8000}), -0.0f);
  EXPECT_TRUE(std::signbit(ToFloat(Float16{0x8000})));
}

// The nearest representable value by search over the neighbours of the
// candidate, ties to the even bit pattern: the definition, independent of
// the bit tricks in half.h.
template <typename Half>
uint16_t NearestBySearch(float f, Half (*round)(float)) {
  const uint16_t guess = round(f).bits;
  uint16_t best = guess;
  double best_err = INFINITY;
  for (int delta = -2; delta <= 2; ++delta) {
    const uint16_t cand = uint16_t(guess + delta);
    if (((cand ^ guess) & 0x8000) != 0) continue;  // stay on the sign's side
    const double v = ToFloat(Half{cand});
    if (std::isnan(v) || std::isinf(v)) continue;
    const double err = std::fabs(v - double(f));
    if (err < best_err || (err == best_err && (cand & 1) == 0)) {
      best = cand;
      best_err = err;
    }
  }
  return best;
}

TEST(HalfConversions, RoundToNearestEvenAndOverflowToInfinity) {
  std::mt19937_64 rng(testing::FreshSeed());
  std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    const float f =
        std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(rng), int(mag(rng))) *
        (rng() & 1 ? 1.0f : -1.0f);
    if (std::fabs(f) < 65504.0f) {
      ASSERT_EQ(ToFloat16(f).bits, NearestBySearch<Float16>(f, &ToFloat16)) << f;
    }
    ASSERT_EQ(ToBFloat16(f).bits, NearestBySearch<BFloat16>(f, &ToBFloat16)) << f;
  }
  // Halfway cases go to the even neighbour.
  EXPECT_EQ(ToFloat16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);  // 1 + half an ulp: 1
  EXPECT_EQ(ToFloat16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  EXPECT_EQ(ToBFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -25)).bits, 0x0000);  // half the smallest subnormal
  EXPECT_EQ(ToFloat16(std::ldexp(1.5f, -25)).bits, 0x0001);
  // Beyond the largest finite value after rounding: infinity.
  EXPECT_EQ(ToFloat16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(ToFloat16(65520.0f).bits, 0x7c00);
  EXPECT_EQ(ToFloat16(-1e6f).bits, 0xfc00);
  EXPECT_EQ(ToBFloat16(3.4e38f).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(NAN))));
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(NAN))));
}

}  // namespace
}  // namespace gpucompute::kernels
