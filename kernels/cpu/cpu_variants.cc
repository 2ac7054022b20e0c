// The CPU backend's variants: cache-friendly, multi-threaded loops that
// serve requests when no GPU is present.
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "cpu/elements.h"
#include "cpu/matmul_tiles.h"
#include "cpu/parallel_for.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::kernels::cpu {
namespace {

// Inputs and outputs are read and written through ElementsIn/ElementsOut
// (elements.h): the server hands over pointers into gRPC slices at any byte
// offset. A byte store may alias anything whose address escaped (the
// Problem, a vector's members), so the loops read sizes and row pointers
// from locals: otherwise they would be reloaded after every store and the
// loops would not vectorize.

// 32x32 blocks keep both the rows read and the rows written in cache.
template <typename T>
void Transpose(const Problem& p, ElementsIn<T> in, ElementsOut<T> out) {
  constexpr int64_t kBlock = 32;
  const int64_t row_blocks = (p.m + kBlock - 1) / kBlock;
  ParallelFor(row_blocks, kBlock * p.n, [&p, in, out](int64_t begin, int64_t end) {
    const int64_t m = p.m, n = p.n;
    for (int64_t rb = begin; rb < end; ++rb) {
      const int64_t r0 = rb * kBlock, r1 = std::min(m, r0 + kBlock);
      for (int64_t c0 = 0; c0 < n; c0 += kBlock) {
        const int64_t c1 = std::min(n, c0 + kBlock);
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) out.Set(c * m + r, in[r * n + c]);
        }
      }
    }
  });
}

// The combining step of each reduce op, as a type so that the loops below
// are compiled once per op with no switch inside them. MIN and MAX
// propagate NaN (NanMin/NanMax); SUM (and MEAN) add in IEEE arithmetic.
struct SumOp {
  static constexpr double kIdentity = 0.0;
  static constexpr bool kExactInAnyOrder = false;  // rounding depends on the order
  static double Apply(double acc, double x) { return acc + x; }
};
struct MinOp {
  static constexpr double kIdentity = std::numeric_limits<double>::infinity();
  static constexpr bool kExactInAnyOrder = true;
  static double Apply(double acc, double x) { return NanMin(acc, x); }
};
struct MaxOp {
  static constexpr double kIdentity = -std::numeric_limits<double>::infinity();
  static constexpr bool kExactInAnyOrder = true;
  static double Apply(double acc, double x) { return NanMax(acc, x); }
};

// Reduces `count` contiguous values. SUM adds in order. MIN and MAX give the
// same value in any order (up to the sign of a zero result and which NaN),
// so they keep kLanes independent accumulators
// (eight short dependency chains instead of one long chain of compares and
// selects) and combine the lanes at the end.
template <typename Combine, typename T>
double ReduceContiguous(ElementsIn<T> x, int64_t count) {
  if constexpr (Combine::kExactInAnyOrder) {
    constexpr int kLanes = 8;
    double lanes[kLanes];
    for (double& l : lanes) l = Combine::kIdentity;
    int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] = Combine::Apply(lanes[j], Widen(x[i + j]));
    }
    double acc = Combine::kIdentity;
    for (; i < count; ++i) acc = Combine::Apply(acc, Widen(x[i]));
    for (double l : lanes) acc = Combine::Apply(acc, l);
    return acc;
  } else {
    double acc = Combine::kIdentity;
    for (int64_t i = 0; i < count; ++i) acc = Combine::Apply(acc, Widen(x[i]));
    return acc;
  }
}

// Reduces rows [begin, end) of an n-column matrix into per-column
// accumulators (row-major reads; the inner loop is element-wise across
// columns and vectorizes).
template <typename Combine, typename T>
void ReduceRowsIntoColumns(ElementsIn<T> in, int64_t n, int64_t begin, int64_t end, double* acc) {
  for (int64_t r = begin; r < end; ++r) {
    const ElementsIn<T> row = in.From(r * n);
    for (int64_t c = 0; c < n; ++c) acc[c] = Combine::Apply(acc[c], Widen(row[c]));
  }
}

template <typename Combine, typename T, typename Out>
void Reduce(const Problem& p, ElementsIn<T> in, ElementsOut<Out> out) {
  const int64_t m = p.m, n = p.n;
  const bool mean = p.reduce_op == ReduceOp::kMean;
  if (p.reduce_axis == ReduceAxis::kPerRow) {
    ParallelFor(m, n, [n, mean, in, out](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const double acc = ReduceContiguous<Combine>(in.From(r * n), n);
        out.Set(r, Narrow<Out>(mean ? acc / double(n) : acc));
      }
    });
    return;
  }
  // ALL and PER_COLUMN: each thread reduces a band of rows into column
  // accumulators; the bands are then combined in a fixed order.
  const int64_t hw = HardwareThreads();
  const int64_t bands = std::max<int64_t>(1, std::min(hw, m));
  std::vector<std::vector<double>> partial(bands, std::vector<double>(n, Combine::kIdentity));
  const int64_t rows_per_band = (m + bands - 1) / bands;
  ParallelFor(bands, rows_per_band * n,
              [&partial, m, n, rows_per_band, in](int64_t begin, int64_t end) {
                for (int64_t band = begin; band < end; ++band) {
                  const int64_t r0 = band * rows_per_band;
                  ReduceRowsIntoColumns<Combine>(in, n, r0, std::min(m, r0 + rows_per_band),
                                                 partial[band].data());
                }
              });
  std::vector<double> column_acc(n, Combine::kIdentity);
  double* columns = column_acc.data();
  for (const auto& band : partial) {
    const double* b = band.data();
    for (int64_t c = 0; c < n; ++c) columns[c] = Combine::Apply(columns[c], b[c]);
  }
  if (p.reduce_axis == ReduceAxis::kPerColumn) {
    for (int64_t c = 0; c < n; ++c) {
      out.Set(c, Narrow<Out>(mean ? columns[c] / double(m) : columns[c]));
    }
    return;
  }
  double acc = Combine::kIdentity;
  for (int64_t c = 0; c < n; ++c) acc = Combine::Apply(acc, columns[c]);
  out.Set(0, Narrow<Out>(mean ? acc / (double(m) * double(n)) : acc));
}

template <typename T, typename Out>
void ReduceAnyOp(const Problem& p, ElementsIn<T> in, ElementsOut<Out> out) {
  switch (p.reduce_op) {
    case ReduceOp::kMin: return Reduce<MinOp>(p, in, out);
    case ReduceOp::kMax: return Reduce<MaxOp>(p, in, out);
    case ReduceOp::kSum:
    case ReduceOp::kMean: return Reduce<SumOp>(p, in, out);
  }
}

}  // namespace

// The launchers kernels/cpu/ladder.cc names.
// Bands of whole tiles (matmul_tiles.h) on all cores.
absl::Status CpuMatMul(const Problem& p, const Buffers& buf) {
  const int64_t tiles_down = (p.m + kTileRows - 1) / kTileRows;
  ParallelFor(tiles_down, kTileRows * p.n * p.k, [&p, &buf](int64_t begin, int64_t end) {
    MatMulRows(p, buf, begin * kTileRows, std::min(p.m, end * kTileRows));
  });
  return absl::OkStatus();
}

// Moves elements unchanged (a 16-bit transpose is exact, bit for bit).
absl::Status CpuTranspose(const Problem& p, const Buffers& buf) {
  ForElementTypes(p, [&](auto in, auto) {
    using In = decltype(in);
    Transpose(p, ElementsIn<In>(buf.a), ElementsOut<In>(buf.out));
  });
  return absl::OkStatus();
}

absl::Status CpuReduce(const Problem& p, const Buffers& buf) {
  ForElementTypes(p, [&](auto in, auto out) {
    ReduceAnyOp(p, ElementsIn<decltype(in)>(buf.a), ElementsOut<decltype(out)>(buf.out));
  });
  return absl::OkStatus();
}

}  // namespace gpucompute::kernels::cpu
