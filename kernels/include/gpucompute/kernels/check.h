// Comparison of a computed result with a float64 reference, by the
// numerical contract of docs/contract.md.
#pragma once

#include <string>
#include <vector>

#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels {

struct CheckResult {
  bool ok = false;
  double max_rel_error = 0;  // worst error in units of the contract's scale
  double tolerance = 0;
  std::string message;  // names the worst element when not ok
};

// Contract tolerance: FP32 1e-4 (matmul) / 1e-5 (reduce), FP64 1e-12,
// reduced precision (TF32) 5e-3, transpose exact.
double Tolerance(const Problem& p, bool reduced_precision);

// `input_a` is the problem's first input (needed for the reduce scale
// sum|x| over its finite elements); `out` holds OutputElements(p) values of
// p.dtype; both may sit at any byte offset. Where the reference is NaN the
// output must be NaN (NaN matches NaN), where it is +/-inf the same infinity;
// anywhere else a NaN or infinite output fails.
CheckResult CheckAgainstReference(const Problem& p, bool reduced_precision, const void* input_a,
                                  const void* out, const std::vector<double>& reference);

}  // namespace gpucompute::kernels
