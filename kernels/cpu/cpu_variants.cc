// The CPU backend's variants: cache-friendly, multi-threaded loops that
// serve requests when no GPU is present.
#include <algorithm>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "cpu/parallel_for.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::kernels::cpu {
namespace {

// i-k-j order: the inner loop streams rows of b and c, which vectorizes;
// accumulation in double keeps FP32 well inside the contract at large k.
template <typename T>
void MatMul(const Problem& p, const T* a, const T* b, T* c) {
  ParallelFor(p.m, p.n * p.k, [&](int64_t begin, int64_t end) {
    std::vector<double> row(p.n);
    for (int64_t i = begin; i < end; ++i) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double aik = a[i * p.k + kk];
        const T* brow = b + kk * p.n;
        for (int64_t j = 0; j < p.n; ++j) row[j] += aik * double(brow[j]);
      }
      for (int64_t j = 0; j < p.n; ++j) c[i * p.n + j] = static_cast<T>(row[j]);
    }
  });
}

// 32x32 blocks keep both the rows read and the rows written in cache.
template <typename T>
void Transpose(const Problem& p, const T* in, T* out) {
  constexpr int64_t kBlock = 32;
  const int64_t row_blocks = (p.m + kBlock - 1) / kBlock;
  ParallelFor(row_blocks, kBlock * p.n, [&](int64_t begin, int64_t end) {
    for (int64_t rb = begin; rb < end; ++rb) {
      const int64_t r0 = rb * kBlock, r1 = std::min(p.m, r0 + kBlock);
      for (int64_t c0 = 0; c0 < p.n; c0 += kBlock) {
        const int64_t c1 = std::min(p.n, c0 + kBlock);
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t c = c0; c < c1; ++c) out[c * p.m + r] = in[r * p.n + c];
        }
      }
    }
  });
}

double Identity(ReduceOp op) {
  if (op == ReduceOp::kMin) return std::numeric_limits<double>::infinity();
  if (op == ReduceOp::kMax) return -std::numeric_limits<double>::infinity();
  return 0.0;
}

double Combine(ReduceOp op, double acc, double x) {
  switch (op) {
    case ReduceOp::kMin: return std::min(acc, x);
    case ReduceOp::kMax: return std::max(acc, x);
    default: return acc + x;
  }
}

// Reduces rows [begin, end) into per-column accumulators (row-major reads).
template <typename T>
void ReduceRowsIntoColumns(const Problem& p, const T* in, int64_t begin, int64_t end,
                           std::vector<double>& acc) {
  for (int64_t r = begin; r < end; ++r) {
    const T* row = in + r * p.n;
    for (int64_t c = 0; c < p.n; ++c) acc[c] = Combine(p.reduce_op, acc[c], double(row[c]));
  }
}

template <typename T>
void Reduce(const Problem& p, const T* in, T* out) {
  const ReduceOp op = p.reduce_op;
  const bool mean = op == ReduceOp::kMean;
  if (p.reduce_axis == ReduceAxis::kPerRow) {
    ParallelFor(p.m, p.n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        double acc = Identity(op);
        for (int64_t c = 0; c < p.n; ++c) acc = Combine(op, acc, double(in[r * p.n + c]));
        out[r] = static_cast<T>(mean ? acc / double(p.n) : acc);
      }
    });
    return;
  }
  // ALL and PER_COLUMN: each thread reduces a band of rows into column
  // accumulators; the bands are then combined in a fixed order.
  const int64_t hw = HardwareThreads();
  const int64_t bands = std::max<int64_t>(1, std::min(hw, p.m));
  std::vector<std::vector<double>> partial(bands, std::vector<double>(p.n, Identity(op)));
  const int64_t rows_per_band = (p.m + bands - 1) / bands;
  ParallelFor(bands, rows_per_band * p.n, [&](int64_t begin, int64_t end) {
    for (int64_t band = begin; band < end; ++band) {
      const int64_t r0 = band * rows_per_band;
      ReduceRowsIntoColumns(p, in, r0, std::min(p.m, r0 + rows_per_band), partial[band]);
    }
  });
  std::vector<double> columns(p.n, Identity(op));
  for (const auto& band : partial) {
    for (int64_t c = 0; c < p.n; ++c) columns[c] = Combine(op, columns[c], band[c]);
  }
  if (p.reduce_axis == ReduceAxis::kPerColumn) {
    for (int64_t c = 0; c < p.n; ++c) {
      out[c] = static_cast<T>(mean ? columns[c] / double(p.m) : columns[c]);
    }
    return;
  }
  double acc = Identity(op);
  for (double v : columns) acc = Combine(op, acc, v);
  out[0] = static_cast<T>(mean ? acc / (double(p.m) * double(p.n)) : acc);
}

}  // namespace

// The launchers kernels/cpu/ladder.cc names.
absl::Status CpuMatMul(const Problem& p, const Buffers& buf) {
  if (p.dtype == DType::kFloat32) {
    MatMul(p, static_cast<const float*>(buf.a), static_cast<const float*>(buf.b),
           static_cast<float*>(buf.out));
  } else {
    MatMul(p, static_cast<const double*>(buf.a), static_cast<const double*>(buf.b),
           static_cast<double*>(buf.out));
  }
  return absl::OkStatus();
}

absl::Status CpuTranspose(const Problem& p, const Buffers& buf) {
  if (p.dtype == DType::kFloat32) {
    Transpose(p, static_cast<const float*>(buf.a), static_cast<float*>(buf.out));
  } else {
    Transpose(p, static_cast<const double*>(buf.a), static_cast<double*>(buf.out));
  }
  return absl::OkStatus();
}

absl::Status CpuReduce(const Problem& p, const Buffers& buf) {
  if (p.dtype == DType::kFloat32) {
    Reduce(p, static_cast<const float*>(buf.a), static_cast<float*>(buf.out));
  } else {
    Reduce(p, static_cast<const double*>(buf.a), static_cast<double*>(buf.out));
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::kernels::cpu
