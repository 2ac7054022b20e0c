// Device pieces shared by the reduction kernels.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/cuda_util.h"
#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels::cuda {

enum class Combine { kSum, kMin, kMax };

inline Combine CombineOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return Combine::kMin;
    case ReduceOp::kMax: return Combine::kMax;
    default: return Combine::kSum;  // SUM and MEAN
  }
}

// MIN and MAX propagate NaN, as NumPy's min/max do: a NaN in either operand
// gives NaN, whatever the order (a plain `b < a ? b : a` keeps `a` when `b`
// is NaN, and fminf drops NaN altogether). On sm_80+ float uses the one
// PTX instruction with exactly this meaning; elsewhere a compare-and-select
// (`a != a` is the NaN test; no branch).
template <typename T>
__host__ __device__ __forceinline__ T NanMin(T a, T b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, float>) {
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
  return (a < b || a != a) ? a : b;
}

template <typename T>
__host__ __device__ __forceinline__ T NanMax(T a, T b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, float>) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
  return (a > b || a != a) ? a : b;
}

// The same as function objects, for CUB (whose own Min/Max compare with
// `<` and so keep or drop a NaN depending on where it falls in the tree).
struct NanMinOp {
  template <typename T>
  __host__ __device__ __forceinline__ T operator()(const T& a, const T& b) const {
    return NanMin(a, b);
  }
};
struct NanMaxOp {
  template <typename T>
  __host__ __device__ __forceinline__ T operator()(const T& a, const T& b) const {
    return NanMax(a, b);
  }
};

template <typename T, Combine C>
struct Reducer {
  __device__ __forceinline__ static T Identity() {
    if constexpr (C == Combine::kSum) return T(0);
    if constexpr (C == Combine::kMin) return T(INFINITY);
    return T(-INFINITY);
  }
  __device__ __forceinline__ static T Apply(T a, T b) {
    if constexpr (C == Combine::kSum) return a + b;
    if constexpr (C == Combine::kMin) return NanMin(a, b);
    return NanMax(a, b);
  }
};

// The value written out: MEAN divides the sum by the element count
// (mean_count > 0 only in a final pass of a MEAN).
template <typename T>
__device__ __forceinline__ T Finish(T acc, int64_t mean_count) {
  return mean_count > 0 ? acc / T(mean_count) : acc;
}

template <typename T, Combine C>
__device__ __forceinline__ T WarpReduce(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = Reducer<T, C>::Apply(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces one value per thread of a block of kThreads; the result is valid in
// thread 0. `scratch` holds kThreads / 32 values.
template <typename T, Combine C, int kThreads>
__device__ __forceinline__ T BlockReduce(T v, T* scratch) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = WarpReduce<T, C>(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kWarps ? scratch[lane] : Reducer<T, C>::Identity();
    v = WarpReduce<T, C>(v);
  }
  return v;
}

}  // namespace gpucompute::kernels::cuda
