#include "server/cuda/fill.h"

namespace gpucompute::server::cuda {
namespace {

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void FillUniformKernel(T* data, int64_t count, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    // 53 random bits -> [0, 1) -> [-1, 1).
    const double u = double(SplitMix64(seed ^ (uint64_t(i) * 0xd1b54a32d192ed03ull)) >> 11) *
                     (1.0 / 9007199254740992.0);
    data[i] = T(2.0 * u - 1.0);
  }
}

__global__ void WidenKernel(const float* src, double* dst, int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = double(src[i]);
  }
}

unsigned Blocks(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

cudaError_t FillUniform(float* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  FillUniformKernel<float><<<Blocks(count), 256, 0, stream>>>(data, count, seed);
  return cudaGetLastError();
}

cudaError_t FillUniform(double* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  FillUniformKernel<double><<<Blocks(count), 256, 0, stream>>>(data, count, seed);
  return cudaGetLastError();
}

cudaError_t WidenToDouble(const float* src, double* dst, int64_t count, cudaStream_t stream) {
  WidenKernel<<<Blocks(count), 256, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

}  // namespace gpucompute::server::cuda
