// The CPU MatMul's register tiles at both widths (the baseline's SSE2 tiles
// run on every x86-64 core; the AVX2 ones where the core has them): every
// element within a rounding of float64 loops written here, at shapes that
// leave partial tiles, partial strips and several bands of rows, with the
// output poisoned with NaN first, and with the rows split between calls as
// ParallelFor splits them.
#include "cpu/matmul_tiles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "support/test_util.h"

namespace gpucompute::kernels::cpu {
namespace {

using testing::FreshSeed;
using testing::RandomValues;

struct Shape {
  int64_t m, n, k;
};

// 1x1x1; fewer rows or columns than a tile; exactly one tile; a partial
// strip and rows left over; a band of 64 rows and 3 more; chunks of k
// (256 each) with their accumulators carried between them, one chunk
// exactly and one element past it; panels of columns (256 each), the last
// partial, with several chunks.
const Shape kShapes[] = {{1, 1, 1},       {3, 5, 7},      {4, 8, 1},     {5, 9, 2},    {67, 13, 33},
                         {130, 17, 1000}, {19, 11, 4096}, {70, 9, 4097}, {9, 3, 9000}, {6, 7, 256},
                         {6, 7, 257},     {5, 300, 300},  {9, 520, 513}, {64, 64, 64}};

std::vector<double> Loops(const Shape& s, const std::vector<double>& a,
                          const std::vector<double>& b) {
  std::vector<double> c(size_t(s.m * s.n), 0.0);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) sum += a[size_t(i * s.k + kk)] * b[size_t(kk * s.n + j)];
      c[size_t(i * s.n + j)] = sum;
    }
  }
  return c;
}

std::string Describe(TileWidth width, DType dtype, const Shape& s, int64_t split, uint64_t seed) {
  return std::string(width == TileWidth::kWide ? "wide" : "baseline") + " " + DTypeName(dtype) +
         " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " rows split at " + std::to_string(split) + " seed=" + std::to_string(seed) +
         " (rerun with GPUCOMPUTE_TEST_SEED)";
}

// Sums in float64 rounded once: FP32 within a unit in the last place of
// the loops' value rounded to FP32 (the sums differ only by fused
// multiply-adds, far below FP32's rounding), FP64 within the numerical
// contract's bound. A tile, strip or band read wrong is off by far more.
template <typename T>
void CheckWidth(TileWidth width, DType dtype) {
  for (const Shape& s : kShapes) {
    const uint64_t seed = FreshSeed();
    std::mt19937_64 rng(seed);
    const std::vector<T> a = RandomValues<T>(s.m * s.k, rng);
    const std::vector<T> b = RandomValues<T>(s.k * s.n, rng);
    const std::vector<double> want =
        Loops(s, std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()));
    // A split at a multiple of the tile's rows, as ParallelFor's chunks are.
    const int64_t split = std::min(s.m, kTileRows * 2);
    SCOPED_TRACE(Describe(width, dtype, s, split, seed));
    std::vector<T> c(size_t(s.m * s.n), std::numeric_limits<T>::quiet_NaN());
    const Problem p{Op::kMatMul, dtype, s.m, s.n, s.k};
    const Buffers buf{a.data(), b.data(), c.data(), nullptr, 0};
    MatMulRowsWith(width, p, buf, 0, split);
    MatMulRowsWith(width, p, buf, split, s.m);
    for (size_t e = 0; e < c.size(); ++e) {
      const double tol = std::is_same_v<T, float> ? std::fabs(want[e]) * 0x1p-23 + 1e-30
                                                  : std::max(1.0, std::fabs(want[e])) * 1e-12;
      ASSERT_LE(std::fabs(double(c[e]) - double(T(want[e]))), tol)
          << "element " << e << ": got " << c[e] << ", loops " << want[e];
    }
  }
}

TEST(CpuMatMulTiles, BaselineTilesMatchFloat64Loops) {
  CheckWidth<float>(TileWidth::kBaseline, DType::kFloat32);
  CheckWidth<double>(TileWidth::kBaseline, DType::kFloat64);
}

TEST(CpuMatMulTiles, WideTilesMatchFloat64Loops) {
  if (!WideTilesHere()) GTEST_SKIP() << "this core has no AVX2 and FMA";
  CheckWidth<float>(TileWidth::kWide, DType::kFloat32);
  CheckWidth<double>(TileWidth::kWide, DType::kFloat64);
}

}  // namespace
}  // namespace gpucompute::kernels::cpu
