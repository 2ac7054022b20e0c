#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
__device__ __forceinline__ T FromDouble(double v) {
  return T(v);
}
template <>
__device__ __forceinline__ __half FromDouble<__half>(double v) {
  return __double2half(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromDouble<__nv_bfloat16>(double v) {
  return __double2bfloat16(v);
}

__device__ __forceinline__ double ToDouble(float v) { return v; }
__device__ __forceinline__ double ToDouble(double v) { return v; }
__device__ __forceinline__ double ToDouble(__half v) { return __half2float(v); }
__device__ __forceinline__ double ToDouble(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__global__ void FillUniformKernel(T* data, int64_t count, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    // 53 random bits -> [0, 1) -> [-1, 1).
    const double u = double(SplitMix64(seed ^ (uint64_t(i) * 0xd1b54a32d192ed03ull)) >> 11) *
                     (1.0 / 9007199254740992.0);
    data[i] = FromDouble<T>(2.0 * u - 1.0);
  }
}

template <typename T>
__global__ void WidenKernel(const T* src, double* dst, int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    dst[i] = ToDouble(src[i]);
  }
}

unsigned Blocks(int64_t count) {
  const int64_t blocks = (count + 255) / 256;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

template <typename T>
cudaError_t Fill(void* data, int64_t count, uint64_t seed, cudaStream_t stream) {
  FillUniformKernel<T><<<Blocks(count), 256, 0, stream>>>(static_cast<T*>(data), count, seed);
  return cudaGetLastError();
}

template <typename T>
cudaError_t Widen(const void* src, double* dst, int64_t count, cudaStream_t stream) {
  WidenKernel<T><<<Blocks(count), 256, 0, stream>>>(static_cast<const T*>(src), dst, count);
  return cudaGetLastError();
}

}  // namespace

cudaError_t FillUniform(kernels::DType dtype, void* data, int64_t count, uint64_t seed,
                        cudaStream_t stream) {
  switch (dtype) {
    case kernels::DType::kFloat32: return Fill<float>(data, count, seed, stream);
    case kernels::DType::kFloat64: return Fill<double>(data, count, seed, stream);
    case kernels::DType::kFloat16: return Fill<__half>(data, count, seed, stream);
    case kernels::DType::kBFloat16: return Fill<__nv_bfloat16>(data, count, seed, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t WidenToDouble(kernels::DType dtype, const void* src, double* dst, int64_t count,
                          cudaStream_t stream) {
  switch (dtype) {
    case kernels::DType::kFloat32: return Widen<float>(src, dst, count, stream);
    case kernels::DType::kFloat64: return Widen<double>(src, dst, count, stream);
    case kernels::DType::kFloat16: return Widen<__half>(src, dst, count, stream);
    case kernels::DType::kBFloat16: return Widen<__nv_bfloat16>(src, dst, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gpucompute::server::cuda
