// Device helpers of the benchmark: random fill, output comparison and the CUB
// reference, kept in a .cu file of their own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::bench {

// Uniform values in [-1, 1) from a hash of (seed, index).
cudaError_t FillUniform(void* data, int64_t count, bool is_double, uint64_t seed,
                        cudaStream_t stream);

// max |x - y| and max |y| over `count` values, computed on the device.
cudaError_t MaxAbsDiff(const void* x, const void* y, int64_t count, bool is_double,
                       cudaStream_t stream, double* max_diff, double* max_abs_y);

// cub::DeviceReduce::Sum over `count` floats, `reps` timed launches after a
// warm-up; median milliseconds through *median_ms, the sum through *sum.
cudaError_t TimeCubSum(const float* data, int64_t count, int reps, cudaStream_t stream,
                       double* median_ms, float* sum);

}  // namespace gpucompute::bench
