// Register tiles: each tile keeps its float64 accumulators in vector
// registers through a chunk of k (4 rows by 8 columns with AVX2, 4 by 4
// with SSE2's 16 registers), so an element of a is read once per 8 (or 4)
// outputs and a row of b once per 4, where i-k-j loops load and store an
// accumulator for every multiply-add. Blocked as GEMM libraries block:
// bands of rows, chunks of k and panels of columns, so that a band's
// widened chunk of a and the strip of b its tiles read stay in the core's
// own caches, and a thread's buffers stay the same size for any shape.
// On one development core (AVX2): 46 GFLOP/s at 64^3 and 45 at 512^3 and
// 64x64x4097, about 95% of its multiply-add peak.
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

// One tile: R rows of c, columns [j0, j0 + width), over one chunk of k
// (kc): R rows of the widened chunk of a (row stride kc) times the strip of
// b's chunk. Its accumulators start at zero on the first chunk and from
// `partial` (R rows of kVectors vectors) after it; on the last chunk they
// are rounded into c, on the others kept in `partial`.
template <typename S, int R, typename Out>
[[gnu::always_inline]] inline void Tile(int64_t n, int64_t kc, const double* a,
                                        const typename S::StripRow* strip,
                                        typename S::StripRow* partial, bool first, bool last,
                                        ElementsOut<Out> c, int64_t j0, int width) {
  using Lanes = typename S::Lanes;
  constexpr int kVectors = sizeof(typename S::StripRow) / sizeof(Lanes);
  constexpr int kLanes = sizeof(Lanes) / sizeof(double);
  Lanes acc[R][kVectors] = {};
  if (!first) {
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kVectors; ++v) acc[r][v] = partial[r].v[v];
    }
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const Lanes* b_vals = strip[kk].v;
    for (int r = 0; r < R; ++r) {
      const double a_val = a[r * kc + kk];
      for (int v = 0; v < kVectors; ++v) acc[r][v] += a_val * b_vals[v];
    }
  }
  if (!last) {
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < kVectors; ++v) partial[r].v[v] = acc[r][v];
    }
    return;
  }
  // Whole strips with a loop of constant length, which the compiler
  // unrolls (with the width a variable it was an eighth of the time).
  for (int r = 0; r < R; ++r) {
    if (width == S::kCols) {
      for (int j = 0; j < S::kCols; ++j) {
        c.Set(r * n + j0 + j, Narrow<Out>(acc[r][j / kLanes][j % kLanes]));
      }
    } else {
      for (int j = 0; j < width; ++j) {
        c.Set(r * n + j0 + j, Narrow<Out>(acc[r][j / kLanes][j % kLanes]));
      }
    }
  }
}

// The blocking, sized so that a thread's buffers stay about 270 KiB (AVX2)
// whatever the shape: at most 64 rows of c a band, 256 of k a chunk and
// 256 columns a panel.
constexpr int64_t kBandRows = 64;
constexpr int64_t kChunk = 256;
constexpr int64_t kPanelCols = 256;

// Each thread's buffers, kept between calls for the next request.
template <typename S>
struct Scratch {
  std::vector<double> a_chunk = std::vector<double>(kBandRows * kChunk);  // widened
  std::vector<typename S::StripRow> strip = std::vector<typename S::StripRow>(kChunk);
  // The accumulators between chunks: a row per band row and strip.
  std::vector<typename S::StripRow> partial =
      std::vector<typename S::StripRow>(kBandRows * (kPanelCols / S::kCols));
};

// Rows [begin, end) of c, at most kBandRows: per panel of columns and
// chunk of k, a's rows are widened once into the scratch, then each strip
// of b, read by every tile of the band. Each multiply-add reads float64
// from the core's own caches: FP32 runs as fast as FP64, and a 512^3
// MatMul 20% faster than with a and b read in place.
template <typename S, typename T, typename Out>
[[gnu::always_inline]] inline void Band(int64_t n, int64_t k, ElementsIn<T> a, ElementsIn<T> b,
                                        ElementsOut<Out> c, int64_t begin, int64_t end,
                                        Scratch<S>& scratch) {
  using Lanes = typename S::Lanes;
  constexpr int kLanes = sizeof(Lanes) / sizeof(double);
  static_assert(kPanelCols % S::kCols == 0, "a panel holds whole strips");
  const int64_t rows = end - begin;
  const ElementsOut<Out> c_band = c.From(begin * n);
  double* const a_chunk = scratch.a_chunk.data();
  typename S::StripRow* const strip = scratch.strip.data();
  for (int64_t n0 = 0; n0 < n; n0 += kPanelCols) {
    const int64_t n1 = std::min(n, n0 + kPanelCols);
    for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - k0);
      const bool first = k0 == 0, last = k0 + kc == k;
      for (int64_t r = 0; r < rows; ++r) {
        const ElementsIn<T> a_row = a.From((begin + r) * k + k0);
        for (int64_t kk = 0; kk < kc; ++kk) a_chunk[r * kc + kk] = Widen(a_row[kk]);
      }
      for (int64_t j0 = n0; j0 < n1; j0 += S::kCols) {
        const int width = int(std::min<int64_t>(S::kCols, n - j0));
        for (int64_t kk = 0; kk < kc; ++kk) {
          const ElementsIn<T> b_row = b.From((k0 + kk) * n + j0);
          typename S::StripRow& row = strip[kk];
          if (width == S::kCols) {
            for (int j = 0; j < S::kCols; ++j) row.v[j / kLanes][j % kLanes] = Widen(b_row[j]);
          } else {
            for (Lanes& v : row.v) v = Lanes{};
            for (int j = 0; j < width; ++j) row.v[j / kLanes][j % kLanes] = Widen(b_row[j]);
          }
        }
        // The band's accumulators for this strip: row r at [r].
        typename S::StripRow* partial = scratch.partial.data() + (j0 - n0) / S::kCols * kBandRows;
        int64_t i = 0;
        for (; i + kTileRows <= rows; i += kTileRows) {
          Tile<S, kTileRows>(n, kc, a_chunk + i * kc, strip, partial + i, first, last,
                             c_band.From(i * n), j0, width);
        }
        static_assert(kTileRows == 4, "the rows left below are 1 to 3");
        switch (rows - i) {
          case 3:
            Tile<S, 3>(n, kc, a_chunk + i * kc, strip, partial + i, first, last, c_band.From(i * n),
                       j0, width);
            break;
          case 2:
            Tile<S, 2>(n, kc, a_chunk + i * kc, strip, partial + i, first, last, c_band.From(i * n),
                       j0, width);
            break;
          case 1:
            Tile<S, 1>(n, kc, a_chunk + i * kc, strip, partial + i, first, last, c_band.From(i * n),
                       j0, width);
            break;
          default: break;
        }
      }
    }
  }
}

template <typename S, typename T, typename Out>
[[gnu::always_inline]] inline void Rows(const Problem& p, const Buffers& buf, int64_t begin,
                                        int64_t end) {
  const int64_t n = p.n, k = p.k;
  const ElementsOut<Out> c(buf.out);
  if (k == 0) {  // nothing to sum: every element is 0
    for (int64_t e = begin * n; e < end * n; ++e) c.Set(e, Narrow<Out>(0.0));
    return;
  }
  thread_local Scratch<S> scratch;
  for (int64_t i = begin; i < end; i += kBandRows) {
    Band<S>(n, k, ElementsIn<T>(buf.a), ElementsIn<T>(buf.b), c, i, std::min(end, i + kBandRows),
            scratch);
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

// Independent chains of multiply-adds on vectors of kLanes: as many as the
// tiles keep (and as a core with two fused multiply-add units of four
// cycles' latency keeps busy).
constexpr int kChains = 8;
constexpr int kWideLanes = 4, kBaselineLanes = 2;
// FLOPs of one round: a multiply and an add on every lane of every chain.
constexpr int64_t ChainFlops(int lanes) { return 2 * kChains * lanes; }

template <int kLanes>
[[gnu::always_inline]] inline double Chains(int64_t iterations) {
  using Lanes = typename cpu::TileShape<kLanes, 1>::Lanes;
  Lanes v[kChains];
  for (int c = 0; c < kChains; ++c) {
    for (int l = 0; l < kLanes; ++l) v[c][l] = 1.0 + 0.01 * c + 0.1 * l;
  }
  const Lanes scale = Lanes{} + 0.999999, add = Lanes{} + 1e-6;
  for (int64_t it = 0; it < iterations; ++it) {
    for (int c = 0; c < kChains; ++c) v[c] = v[c] * scale + add;
  }
  double sum = 0;
  for (int c = 0; c < kChains; ++c) {
    for (int l = 0; l < kLanes; ++l) sum += v[c][l];
  }
  return sum;
}

#ifdef GPUCOMPUTE_WIDE_VECTORS
GPUCOMPUTE_WIDE_VECTORS double WideChains(int64_t iterations) {
  return Chains<kWideLanes>(iterations);
}
#endif

}  // namespace

int64_t CpuMultiplyAddChainFlops() {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  if (cpu::WideVectorsHere()) return ChainFlops(kWideLanes);
#endif
  return ChainFlops(kBaselineLanes);
}

double CpuMultiplyAddChains(int64_t iterations) {
#ifdef GPUCOMPUTE_WIDE_VECTORS
  if (cpu::WideVectorsHere()) return WideChains(iterations);
#endif
  return Chains<kBaselineLanes>(iterations);
}

}  // namespace gpucompute::kernels
