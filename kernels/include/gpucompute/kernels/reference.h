// Ground truth: plain float64 loops over the inputs, used by tests and by
// Profile to check every variant.
#pragma once

#include <vector>

#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels {

// `a` and `b` hold p.dtype values, at any byte offset (b is ignored for
// one-input ops). Returns OutputElements(p) values in row-major order. MIN and
// MAX propagate NaN as NumPy's min/max do; SUM and MEAN are IEEE sums.
std::vector<double> ReferenceResult(const Problem& p, const void* a, const void* b);

}  // namespace gpucompute::kernels
