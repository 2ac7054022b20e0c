// Shapes a variant cannot take: the 2-D CUDA MatMul kernels bound m by their
// grid's 65535 row blocks. "auto" never picks such a variant, neither as its
// fallback nor from a bucket measured on shorter matrices, nor to calibrate.
#include "server/engine/variant_limits.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/engine/variant_selector.h"

namespace gpucompute::server {
namespace {

kernels::Variant Fake(const std::string& name, int fallback_rank) {
  kernels::Variant v;
  v.name = name;
  v.backend = kernels::Backend::kCuda;
  v.dtypes = {kernels::DType::kFloat32};
  v.fallback_rank = fallback_rank;
  v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
  return v;
}

kernels::Problem MatMul(int64_t m) {
  kernels::Problem p;
  p.m = m;
  p.n = p.k = 64;
  return p;
}

TEST(VariantLimits, TwoDimensionalMatMulGridsBoundM) {
  for (auto [name, max_m] : {std::pair{"naive", int64_t{65535} * 8},
                             {"tiled16", int64_t{65535} * 16},
                             {"tiled32", int64_t{65535} * 32},
                             {"tiled32_padded", int64_t{65535} * 32},
                             {"register_tiled", int64_t{65535} * 128}}) {
    const kernels::Variant v = Fake(name, 0);
    EXPECT_EQ(ShapeRefusal(v, MatMul(max_m)), "") << name;
    const std::string refusal = ShapeRefusal(v, MatMul(max_m + 1));
    EXPECT_NE(refusal.find(absl::StrCat("\"", name, "\"")), std::string::npos) << refusal;
    EXPECT_NE(refusal.find(absl::StrCat("m <= ", max_m)), std::string::npos) << refusal;
  }
  EXPECT_EQ(ShapeRefusal(Fake("cublas", 0), MatMul(int64_t{1} << 30)), "");
  kernels::Variant cpu = Fake("naive", 0);
  cpu.backend = kernels::Backend::kCpu;
  EXPECT_EQ(ShapeRefusal(cpu, MatMul(int64_t{1} << 30)), "");
}

TEST(VariantLimits, AutoNeverPicksAVariantThatCannotTakeTheShape) {
  kernels::Registry registry;
  ASSERT_TRUE(registry.Add(Fake("register_tiled", 1)).ok());
  ASSERT_TRUE(registry.Add(Fake("cublas", 2)).ok());
  VariantSelector selector(registry, kernels::Backend::kCuda);
  const int64_t tall = int64_t{65535} * 128 + 1;
  // The fallback skips it, and so does a calibration.
  EXPECT_EQ(selector.Select(MatMul(1000), false)->name, "register_tiled");
  EXPECT_EQ(selector.Select(MatMul(tall), false)->name, "cublas");
  const VariantSelector::Choice choice = selector.Choose(MatMul(tall), false);
  EXPECT_EQ(choice.variant->name, "cublas");
  for (const kernels::Variant* v : choice.candidates) EXPECT_NE(v->name, "register_tiled");
  // A bucket measured on shorter matrices (same power of two) that chose it.
  VariantMeasurement fast;
  fast.variant = registry.Find(kernels::Op::kMatMul, kernels::Backend::kCuda, "register_tiled");
  fast.ok = true;
  fast.times_us = {1, 1, 1};
  selector.Record(MatMul(int64_t{65535} * 128), {fast});
  EXPECT_EQ(selector.Select(MatMul(int64_t{65535} * 128), false)->name, "register_tiled");
  EXPECT_EQ(selector.Select(MatMul(tall), false)->name, "cublas");
  EXPECT_EQ(selector.Choose(MatMul(tall), false).variant->name, "cublas");
}

}  // namespace
}  // namespace gpucompute::server
