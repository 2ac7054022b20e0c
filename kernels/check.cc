#include "gpucompute/kernels/check.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "cpu/elements.h"

namespace gpucompute::kernels {
namespace {

// Through memcpy: inputs and outputs may sit at any byte offset.
template <typename T>
double At(const void* data, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(data) + i * int64_t(sizeof(T)), sizeof(T));
  return cpu::Widen(v);
}

double ValueAt(DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return At<float>(data, i);
    case DType::kFloat64: return At<double>(data, i);
    case DType::kFloat16: return At<Float16>(data, i);
    case DType::kBFloat16: return At<BFloat16>(data, i);
  }
  return NAN;  // not reached: every case returns
}

// The scale an output element's error is measured against: sum|x| over the
// finite elements it reduces (divided by their count for MEAN), plus the
// output dtype's final rounding in proportion to |reference| (scaled to the
// same tolerance). Infinities
// and NaNs are left out: they would make the scale infinite or NaN and every
// error zero or NaN; an element whose reference is not finite is compared
// exactly (ElementError).
std::vector<double> ReduceScales(const Problem& p, const void* input,
                                 const std::vector<double>& reference) {
  std::vector<double> scale(OutputElements(p), 0.0);
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      const double x = std::fabs(ValueAt(p.dtype, input, r * p.n + c));
      if (!std::isfinite(x)) continue;
      const int64_t o = p.reduce_axis == ReduceAxis::kAll      ? 0
                        : p.reduce_axis == ReduceAxis::kPerRow ? r
                                                               : c;
      scale[o] += x;
    }
  }
  if (p.reduce_op == ReduceOp::kMean) {
    const double count = p.reduce_axis == ReduceAxis::kAll      ? double(p.m) * double(p.n)
                         : p.reduce_axis == ReduceAxis::kPerRow ? double(p.n)
                                                                : double(p.m);
    for (double& s : scale) s /= count;
  }
  const DTypeInfo out = Describe(OutputDType(p));
  for (size_t i = 0; i < scale.size(); ++i) {
    if (out.reduce_rounding > 0 && std::isfinite(reference[i])) {
      scale[i] += out.reduce_rounding / out.reduce_tolerance * std::fabs(reference[i]);
    }
    scale[i] = std::max(scale[i], 1e-300);
  }
  return scale;
}

// The error of one element in units of `scale`. A NaN reference (a NaN in
// a reduced range, inf - inf, ...) expects NaN and an infinite one the same
// infinity: both are met exactly or not at all. A non-finite result where the
// reference is finite is an infinite error.
double ElementError(double got, double ref, double scale) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : INFINITY;
  if (!std::isfinite(ref) || !std::isfinite(got)) return got == ref ? 0 : INFINITY;
  return std::fabs(got - ref) / scale;
}

}  // namespace

// The output dtype's bound (kernels/include/gpucompute/kernels/dtype.h);
// TF32 (reduced precision) has its own.
double Tolerance(const Problem& p, bool reduced_precision) {
  switch (p.op) {
    case Op::kTranspose: return 0;
    case Op::kMatMul: return reduced_precision ? 5e-3 : Describe(OutputDType(p)).matmul_tolerance;
    case Op::kReduce: return reduced_precision ? 5e-3 : Describe(OutputDType(p)).reduce_tolerance;
  }
  return 0;  // not reached: every case returns
}

CheckResult CheckAgainstReference(const Problem& p, bool reduced_precision, const void* input_a,
                                  const void* out, const std::vector<double>& reference) {
  CheckResult result;
  result.tolerance = Tolerance(p, reduced_precision);
  const int64_t count = OutputElements(p);
  if (static_cast<int64_t>(reference.size()) != count) {
    result.message =
        absl::StrFormat("reference has %d elements, output %d", reference.size(), count);
    return result;
  }
  std::vector<double> scales;
  double matmul_scale = 1.0;
  if (p.op == Op::kReduce) {
    scales = ReduceScales(p, input_a, reference);
  } else if (p.op == Op::kMatMul) {
    for (double r : reference) {
      if (std::isfinite(r)) matmul_scale = std::max(matmul_scale, std::fabs(r));
    }
  }
  int64_t worst = -1;
  for (int64_t i = 0; i < count; ++i) {
    const double got = ValueAt(OutputDType(p), out, i);
    const double scale = p.op == Op::kReduce ? scales[i] : matmul_scale;
    const double err = ElementError(got, reference[i], scale);
    if (worst < 0 || err > result.max_rel_error) {
      result.max_rel_error = err;
      worst = i;
    }
  }
  result.ok = count > 0 && result.max_rel_error <= result.tolerance;
  if (!result.ok && worst >= 0) {
    const int64_t cols = OutputCols(p);
    result.message = absl::StrFormat(
        "element [%d,%d]: got %.9g, reference %.9g, relative error %.3g > tolerance %.1g",
        worst / cols, worst % cols, ValueAt(OutputDType(p), out, worst), reference[worst],
        result.max_rel_error, result.tolerance);
  }
  return result;
}

}  // namespace gpucompute::kernels
