// Register tiles: each tile keeps its float64 accumulators in vector
// registers for the whole k loop (4 rows by 8 columns with AVX2, 4 by 4
// with SSE2's 16 registers), so an element of a is read once per 8 (or 4)
// outputs and a row of b once per 4, where i-k-j loops load and store an
// accumulator for every multiply-add. Within a band of rows the loop runs
// down one strip of b at a time: a strip of k rows (k * 64 bytes with
// AVX2) stays in the core's own caches while every tile of the band reads
// it.
#include "cpu/matmul_tiles.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "cpu/elements.h"
#include "cpu/wide_vectors.h"
#include "gpucompute/kernels/cpu_multiply_add.h"

namespace gpucompute::kernels::cpu {
namespace {

// A tile's shape for a vector of kLanes float64s: kVectors vectors across.
// The accumulators are a vector type (an array of doubles stayed on the
// stack); the struct carries it, because a vector type loses its attributes
// as a template argument.
template <int kLanes, int kVectors>
struct TileShape {
  typedef double Lanes __attribute__((vector_size(8 * kLanes)));
  static constexpr int kCols = kLanes * kVectors;
  // One row of a strip of b, widened.
  struct alignas(8 * kLanes) StripRow {
    Lanes v[kVectors];
  };
};
using WideTile = TileShape<4, 2>;      // AVX2: 8 accumulators of 4
using BaselineTile = TileShape<2, 2>;  // SSE2: 8 accumulators of 2

// One tile: R rows of c from R rows of a, widened (row stride k), and the
// strip of b it multiplies. Stores `width` columns from j0 on.
template <typename S, int R, typename Out>
[[gnu::always_inline]] inline void Tile(int64_t n, int64_t k, const double* a,
                                        const typename S::StripRow* strip, ElementsOut<Out> c,
                                        int64_t j0, int width) {
  using Lanes = typename S::Lanes;
  constexpr int kVectors = sizeof(typename S::StripRow) / sizeof(Lanes);
  constexpr int kLanes = sizeof(Lanes) / sizeof(double);
  Lanes acc[R][kVectors] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    const Lanes* b_vals = strip[kk].v;
    for (int r = 0; r < R; ++r) {
      const double a_val = a[r * k + kk];
      for (int v = 0; v < kVectors; ++v) acc[r][v] += a_val * b_vals[v];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < width; ++j) {
      c.Set(r * n + j0 + j, Narrow<Out>(acc[r][j / kLanes][j % kLanes]));
    }
  }
}

// Rows [begin, end) of c: a's rows are widened once into `a_rows`, then
// each strip of b into `strip`, read by every tile of the band. Widened
// ahead, each multiply-add reads float64 from the first-level cache, and
// FP32 runs as fast as FP64 (a 64^3 MatMul in 13 us on one development
// core, against 16-20 us converting a's elements as they were read).
template <typename S, typename T, typename Out>
[[gnu::always_inline]] inline void Band(int64_t n, int64_t k, ElementsIn<T> a, ElementsIn<T> b,
                                        ElementsOut<Out> c, int64_t begin, int64_t end,
                                        double* a_rows, typename S::StripRow* strip) {
  using Lanes = typename S::Lanes;
  constexpr int kLanes = sizeof(Lanes) / sizeof(double);
  const int64_t rows = end - begin;
  const ElementsIn<T> a_band = a.From(begin * k);
  for (int64_t e = 0; e < rows * k; ++e) a_rows[e] = Widen(a_band[e]);
  const ElementsOut<Out> c_band = c.From(begin * n);
  for (int64_t j0 = 0; j0 < n; j0 += S::kCols) {
    const int width = int(std::min<int64_t>(S::kCols, n - j0));
    for (int64_t kk = 0; kk < k; ++kk) {
      const ElementsIn<T> b_row = b.From(kk * n + j0);
      typename S::StripRow& row = strip[kk];
      for (Lanes& v : row.v) v = Lanes{};
      for (int j = 0; j < width; ++j) row.v[j / kLanes][j % kLanes] = Widen(b_row[j]);
    }
    int64_t i = 0;
    for (; i + kTileRows <= rows; i += kTileRows) {
      Tile<S, kTileRows>(n, k, a_rows + i * k, strip, c_band.From(i * n), j0, width);
    }
    static_assert(kTileRows == 4, "the rows left below are 1 to 3");
    switch (rows - i) {
      case 3: Tile<S, 3>(n, k, a_rows + i * k, strip, c_band.From(i * n), j0, width); break;
      case 2: Tile<S, 2>(n, k, a_rows + i * k, strip, c_band.From(i * n), j0, width); break;
      case 1: Tile<S, 1>(n, k, a_rows + i * k, strip, c_band.From(i * n), j0, width); break;
      default: break;
    }
  }
}

// A band's widened rows of a take at most this much (or kTileRows rows).
constexpr int64_t kBandBytes = 256 << 10;

template <typename S, typename T, typename Out>
[[gnu::always_inline]] inline void Rows(const Problem& p, const Buffers& buf, int64_t begin,
                                        int64_t end) {
  const int64_t n = p.n, k = p.k;
  const ElementsOut<Out> c(buf.out);
  if (k == 0) {  // nothing to sum: every element is 0
    for (int64_t e = begin * n; e < end * n; ++e) c.Set(e, Narrow<Out>(0.0));
    return;
  }
  const int64_t band_rows = std::clamp<int64_t>(
      kBandBytes / int64_t(sizeof(double)) / k / kTileRows * kTileRows, kTileRows, 64);
  // Each thread's buffers, kept between calls: at most 256 KiB of a's rows
  // (or 4 rows), and k rows of strip (64 bytes each).
  thread_local std::vector<double> a_rows;
  thread_local std::vector<typename S::StripRow> strip;
  if (a_rows.size() < size_t(band_rows * k)) a_rows.resize(size_t(band_rows * k));
  if (strip.size() < size_t(k)) strip.resize(size_t(k));
  for (int64_t i = begin; i < end; i += band_rows) {
    Band<S>(n, k, ElementsIn<T>(buf.a), ElementsIn<T>(buf.b), c, i, std::min(end, i + band_rows),
            a_rows.data(), strip.data());
  }
}

// Every element type's rows for one tile shape.
template <typename S>
[[gnu::always_inline]] inline void RowsOfAnyType(const Problem& p, const Buffers& buf,
                                                 int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32: return Rows<S, float, float>(p, buf, begin, end);
    case DType::kFloat64: return Rows<S, double, double>(p, buf, begin, end);
    case DType::kFloat16:
      return p.float32_output ? Rows<S, Float16, float>(p, buf, begin, end)
                              : Rows<S, Float16, Float16>(p, buf, begin, end);
    case DType::kBFloat16:
      return p.float32_output ? Rows<S, BFloat16, float>(p, buf, begin, end)
                              : Rows<S, BFloat16, BFloat16>(p, buf, begin, end);
  }
  std::abort();  // not reached: every case returns
}

#ifdef GPUCOMPUTE_WIDE_VECTORS
GPUCOMPUTE_WIDE_VECTORS void WideRows(const Problem& p, const Buffers& buf, int64_t begin,
                                      int64_t end) {
  RowsOfAnyType<WideTile>(p, buf, begin, end);
}
#endif

void BaselineRows(const Problem& p, const Buffers& buf, int64_t begin, int64_t end) {
  RowsOfAnyType<BaselineTile>(p, buf, begin, end);
}

}  // namespace

bool WideTilesHere() {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  return WideVectorsHere();
#else
  return false;
#endif
}

void MatMulRowsWith(TileWidth width, const Problem& p, const Buffers& buf, int64_t row_begin,
                    int64_t row_end) {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  if (width == TileWidth::kWide && WideVectorsHere()) {
    return WideRows(p, buf, row_begin, row_end);
  }
#endif
  BaselineRows(p, buf, row_begin, row_end);
}

void MatMulRows(const Problem& p, const Buffers& buf, int64_t row_begin, int64_t row_end) {
  MatMulRowsWith(WideTilesHere() ? TileWidth::kWide : TileWidth::kBaseline, p, buf, row_begin,
                 row_end);
}

}  // namespace gpucompute::kernels::cpu

namespace gpucompute::kernels {
namespace {

// Eight independent chains of multiply-adds on vectors of kLanes: as many
// as the tiles keep (and as a core with two fused multiply-add units of
// four cycles' latency keeps busy).
template <int kLanes>
[[gnu::always_inline]] inline double Chains(int64_t iterations) {
  using Lanes = typename cpu::TileShape<kLanes, 1>::Lanes;
  Lanes v[8];
  for (int c = 0; c < 8; ++c) {
    for (int l = 0; l < kLanes; ++l) v[c][l] = 1.0 + 0.01 * c + 0.1 * l;
  }
  const Lanes scale = Lanes{} + 0.999999, add = Lanes{} + 1e-6;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int c = 0; c < 8; ++c) v[c] = v[c] * scale + add;
  }
  double sum = 0;
  for (int c = 0; c < 8; ++c) {
    for (int l = 0; l < kLanes; ++l) sum += v[c][l];
  }
  return sum;
}

#ifdef GPUCOMPUTE_WIDE_VECTORS
GPUCOMPUTE_WIDE_VECTORS double WideChains(int64_t iterations) { return Chains<4>(iterations); }
#endif

}  // namespace

int64_t CpuMultiplyAddChainFlops() {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  if (cpu::WideVectorsHere()) return 2 * 8 * 4;
#endif
  return 2 * 8 * 2;
}

double CpuMultiplyAddChains(int64_t iterations) {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  if (cpu::WideVectorsHere()) return WideChains(iterations);
#endif
  return Chains<2>(iterations);
}

}  // namespace gpucompute::kernels
