// Device-side data generation for Profile and calibration.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::server::cuda {

// Uniform values in [-1, 1) from a counter-based hash of (seed, index):
// reproducible from the seed, and never all zeros.
cudaError_t FillUniform(float* data, int64_t count, uint64_t seed, cudaStream_t stream);
cudaError_t FillUniform(double* data, int64_t count, uint64_t seed, cudaStream_t stream);

// dst[i] = double(src[i]), for float64 references of float32 inputs.
cudaError_t WidenToDouble(const float* src, double* dst, int64_t count, cudaStream_t stream);

}  // namespace gpucompute::server::cuda
