#include "gpucompute/kernels/reference.h"

#include <algorithm>
#include <limits>

#include "cpu/elements.h"

namespace gpucompute::kernels {
namespace {

using cpu::ElementsIn;

// Inputs are read through ElementsIn: they may sit at any byte offset (a
// payload inside a gRPC message).

template <typename T>
std::vector<double> MatMul(const Problem& p, ElementsIn<T> a, ElementsIn<T> b) {
  std::vector<double> c(p.m * p.n, 0.0);
  for (int64_t i = 0; i < p.m; ++i) {
    double* row = c.data() + i * p.n;
    for (int64_t kk = 0; kk < p.k; ++kk) {
      const double aik = cpu::Widen(a[i * p.k + kk]);
      const ElementsIn<T> brow = b.From(kk * p.n);
      for (int64_t j = 0; j < p.n; ++j) row[j] += aik * cpu::Widen(brow[j]);
    }
  }
  return c;
}

template <typename T>
std::vector<double> Transpose(const Problem& p, ElementsIn<T> a) {
  std::vector<double> out(p.m * p.n);
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) out[c * p.m + r] = cpu::Widen(a[r * p.n + c]);
  }
  return out;
}

// MIN and MAX propagate NaN as NumPy's min/max do.
template <typename T>
std::vector<double> Reduce(const Problem& p, ElementsIn<T> a) {
  const int64_t outputs = OutputElements(p);
  double init = 0;
  if (p.reduce_op == ReduceOp::kMin) init = std::numeric_limits<double>::infinity();
  if (p.reduce_op == ReduceOp::kMax) init = -std::numeric_limits<double>::infinity();
  std::vector<double> out(outputs, init);
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      const double x = cpu::Widen(a[r * p.n + c]);
      double& o = out[p.reduce_axis == ReduceAxis::kAll      ? 0
                      : p.reduce_axis == ReduceAxis::kPerRow ? r
                                                             : c];
      switch (p.reduce_op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean: o += x; break;
        case ReduceOp::kMin: o = cpu::NanMin(o, x); break;
        case ReduceOp::kMax: o = cpu::NanMax(o, x); break;
      }
    }
  }
  if (p.reduce_op == ReduceOp::kMean) {
    const double count = double(p.m) * double(p.n) / double(outputs);
    for (double& o : out) o /= count;
  }
  return out;
}

template <typename T>
std::vector<double> Dispatch(const Problem& p, const void* a, const void* b) {
  const ElementsIn<T> ta(a);
  switch (p.op) {
    case Op::kMatMul: return MatMul<T>(p, ta, ElementsIn<T>(b));
    case Op::kTranspose: return Transpose<T>(p, ta);
    case Op::kReduce: return Reduce<T>(p, ta);
  }
  return {};
}

}  // namespace

// In float64 from the inputs as given (16-bit ones widen exactly).
std::vector<double> ReferenceResult(const Problem& p, const void* a, const void* b) {
  return cpu::ForElementTypes(p, [&](auto in, auto) { return Dispatch<decltype(in)>(p, a, b); });
}

}  // namespace gpucompute::kernels
