// Shapes a variant cannot take: the 2-D CUDA MatMul kernels bound m by their
// grid's 65535 row blocks, as their ladder rows declare. "auto" never picks
// such a variant, neither as its fallback nor from a bucket measured on
// shorter matrices, nor to calibrate.
#include "server/engine/variant_limits.h"

#include <gtest/gtest.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "server/engine/variant_selector.h"

namespace gpucompute::server {
namespace {

kernels::Variant Fake(const std::string& name, int fallback_rank, int64_t grid_y_rows = 0) {
  kernels::Variant v;
  v.name = name;
  v.backend = kernels::Backend::kCuda;
  v.dtypes = {kernels::DType::kFloat32};
  v.fallback_rank = fallback_rank;
  v.grid_y_rows = grid_y_rows;
  v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
  return v;
}

kernels::Problem MatMul(int64_t m) {
  kernels::Problem p;
  p.m = m;
  p.n = p.k = 64;
  return p;
}

// The rows a block of each 2-D kernel computes (naive.cu: 32 x 8 threads;
// tiled.cu: tile x tile; register_tiled.cu: 128 x 128), as the MatMul ladder
// declares them; the other variants take any m.
TEST(VariantLimits, TheCudaMatMulLadderDeclaresItsGrids) {
  if (!kernels::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  const std::map<std::string, int64_t> rows = {{"naive", 8},
                                               {"tiled16", 16},
                                               {"tiled32", 32},
                                               {"tiled32_padded", 32},
                                               {"register_tiled", 128}};
  const kernels::Registry& registry = kernels::DefaultRegistry();
  for (const kernels::Variant* v : registry.List(kernels::Op::kMatMul, kernels::Backend::kCuda)) {
    auto it = rows.find(v->name);
    EXPECT_EQ(v->grid_y_rows, it != rows.end() ? it->second : 0) << v->name;
  }
  const kernels::Variant* naive =
      registry.Find(kernels::Op::kMatMul, kernels::Backend::kCuda, "naive");
  ASSERT_NE(naive, nullptr);
  EXPECT_EQ(ShapeRefusal(registry, *naive, MatMul(int64_t{65535} * 8 + 1)),
            "variant \"naive\" takes MatMul with m <= 524280 (8 rows a block, at most 65535 "
            "blocks on grid.y); this one has m = 524281: use cublas or auto");
}

TEST(VariantLimits, TwoDimensionalMatMulGridsBoundM) {
  kernels::Registry registry;
  for (auto [name, rows] : {std::pair{"naive", int64_t{8}},
                            {"tiled16", int64_t{16}},
                            {"tiled32", int64_t{32}},
                            {"register_tiled", int64_t{128}}}) {
    const kernels::Variant v = Fake(name, 0, rows);
    const int64_t max_m = 65535 * rows;
    EXPECT_EQ(ShapeRefusal(registry, v, MatMul(max_m)), "") << name;
    const std::string refusal = ShapeRefusal(registry, v, MatMul(max_m + 1));
    EXPECT_NE(refusal.find(absl::StrCat("\"", name, "\"")), std::string::npos) << refusal;
    EXPECT_NE(refusal.find(absl::StrCat("m <= ", max_m)), std::string::npos) << refusal;
    EXPECT_NE(refusal.find(": use auto"), std::string::npos) << refusal;  // no vendor's variant
  }
  EXPECT_EQ(ShapeRefusal(registry, Fake("cublas", 0), MatMul(int64_t{1} << 30)), "");
}

TEST(VariantLimits, AutoNeverPicksAVariantThatCannotTakeTheShape) {
  kernels::Registry registry;
  ASSERT_TRUE(registry.Add(Fake("register_tiled", 1, 128)).ok());
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
