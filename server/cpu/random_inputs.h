// Helpers shared by devices when profiling variants.
#pragma once

#include <cstdint>
#include <vector>

#include "gpucompute/kernels/problem.h"

namespace gpucompute::server {

// Uniform random values in [-1, 1) of p.dtype for the problem's inputs;
// `a` and `b` are resized to the byte counts of the inputs.
void FillRandomInputs(const kernels::Problem& p, uint64_t seed, std::vector<char>& a,
                      std::vector<char>& b);

// Sets `elements` values of `dtype` to quiet NaN so a variant that skips an
// output element cannot pass the check.
void PoisonWithNaN(kernels::DType dtype, void* data, int64_t elements);

}  // namespace gpucompute::server
