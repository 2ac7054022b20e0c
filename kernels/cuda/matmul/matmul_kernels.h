// Host-side launchers of the matmul kernels (C = A * B, row-major, A m x k,
// B k x n). Each enqueues on `stream` and returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::kernels::cuda {

template <typename T>
cudaError_t LaunchNaiveMatMul(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream);

}  // namespace gpucompute::kernels::cuda
