// Device-side data generation for Profile and calibration.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpucompute/kernels/dtype.h"

namespace gpucompute::server::cuda {

// `count` elements of `dtype`, uniform in [-1, 1) from a counter-based hash
// of (seed, index): reproducible from the seed, and never all zeros. 16-bit
// values are the float64 draw rounded to nearest.
cudaError_t FillUniform(kernels::DType dtype, void* data, int64_t count, uint64_t seed,
                        cudaStream_t stream);

// dst[i] = double(src[i]) for elements of `dtype` (exact), for float64
// references of float32 and 16-bit inputs.
cudaError_t WidenToDouble(kernels::DType dtype, const void* src, double* dst, int64_t count,
                          cudaStream_t stream);

}  // namespace gpucompute::server::cuda
