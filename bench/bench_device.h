// Device helpers of the benchmark: random fill, output comparison and the CUB
// reference, kept in a .cu file of their own (no abseil: nvcc compiles it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpucompute::bench {

// Uniform values in [-1, 1) from a hash of (seed, index).
cudaError_t FillUniform(void* data, int64_t count, bool is_double, uint64_t seed,
                        cudaStream_t stream);

// max |x - y| and max |y| over `count` values, computed on the device.
cudaError_t MaxAbsDiff(const void* x, const void* y, int64_t count, bool is_double,
                       cudaStream_t stream, double* max_diff, double* max_abs_y);

// cub::DeviceReduce::Sum over `count` floats into *sum (device memory), with
// `scratch` of at least the *bytes CubSumScratchBytes gives. Timed by the caller.
cudaError_t CubSumScratchBytes(int64_t count, size_t* bytes);
cudaError_t CubSum(const float* data, int64_t count, void* scratch, size_t scratch_bytes,
                   float* sum, cudaStream_t stream);

}  // namespace gpucompute::bench
