#include "bench_device.h"

#include <algorithm>
#include <cub/device/device_reduce.cuh>
#include <vector>

namespace gpucompute::bench {
namespace {

__device__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

template <typename T>
__global__ void FillKernel(T* data, int64_t count, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t h = Mix(seed * 0x9e3779b97f4a7c15ULL + uint64_t(i));
    data[i] = T(double(h >> 11) * (2.0 / 9007199254740992.0) - 1.0);
  }
}

constexpr int kDiffBlocks = 1024;

template <typename T>
__global__ void DiffKernel(const T* x, const T* y, int64_t count, double* diff, double* mag) {
  __shared__ double sd[256], sm[256];
  double d = 0, m = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const double a = double(x[i]), b = double(y[i]);
    // NaN anywhere makes the difference infinite.
    d = fmax(d, (a == a) ? fabs(a - b) : INFINITY);
    m = fmax(m, fabs(b));
  }
  sd[threadIdx.x] = d;
  sm[threadIdx.x] = m;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sd[threadIdx.x] = fmax(sd[threadIdx.x], sd[threadIdx.x + s]);
      sm[threadIdx.x] = fmax(sm[threadIdx.x], sm[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) diff[blockIdx.x] = sd[0], mag[blockIdx.x] = sm[0];
}

}  // namespace

cudaError_t FillUniform(void* data, int64_t count, bool is_double, uint64_t seed,
                        cudaStream_t stream) {
  if (is_double)
    FillKernel<double><<<4096, 256, 0, stream>>>(static_cast<double*>(data), count, seed);
  else
    FillKernel<float><<<4096, 256, 0, stream>>>(static_cast<float*>(data), count, seed);
  return cudaGetLastError();
}

cudaError_t MaxAbsDiff(const void* x, const void* y, int64_t count, bool is_double,
                       cudaStream_t stream, double* max_diff, double* max_abs_y) {
  double* partial = nullptr;
  cudaError_t err = cudaMalloc(&partial, 2 * kDiffBlocks * sizeof(double));
  if (err != cudaSuccess) return err;
  if (is_double) {
    DiffKernel<double><<<kDiffBlocks, 256, 0, stream>>>(static_cast<const double*>(x),
                                                        static_cast<const double*>(y), count,
                                                        partial, partial + kDiffBlocks);
  } else {
    DiffKernel<float><<<kDiffBlocks, 256, 0, stream>>>(static_cast<const float*>(x),
                                                       static_cast<const float*>(y), count, partial,
                                                       partial + kDiffBlocks);
  }
  std::vector<double> host(2 * kDiffBlocks);
  err = cudaGetLastError();
  if (err == cudaSuccess)
    err = cudaMemcpyAsync(host.data(), partial, host.size() * sizeof(double),
                          cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  cudaFree(partial);
  *max_diff = *std::max_element(host.begin(), host.begin() + kDiffBlocks);
  *max_abs_y = *std::max_element(host.begin() + kDiffBlocks, host.end());
  return err;
}

cudaError_t CubSumScratchBytes(int64_t count, size_t* bytes) {
  const float* no_input = nullptr;
  float* no_output = nullptr;
  // Without scratch CUB only computes the size it needs.
  return cub::DeviceReduce::Sum(nullptr, *bytes, no_input, no_output, count);
}

cudaError_t CubSum(const float* data, int64_t count, void* scratch, size_t scratch_bytes,
                   float* sum, cudaStream_t stream) {
  return cub::DeviceReduce::Sum(scratch, scratch_bytes, data, sum, count, stream);
}

}  // namespace gpucompute::bench
