// What the reductions read, add in and write, by input type: float and
// double reduce in their own type; FP16 and BF16 widen each value to float
// (exact), reduce in float, and round once, when the result is stored, to
// the output type (the input's, or float when float32 output is asked for).
// MIN and MAX stay exact: a 16-bit value widened and rounded back is itself.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/cuda_util.h"

namespace gpucompute::kernels::cuda {

template <typename T>
struct AccumulatorOf {
  using Type = T;
};
template <>
struct AccumulatorOf<__half> {
  using Type = float;
};
template <>
struct AccumulatorOf<__nv_bfloat16> {
  using Type = float;
};
template <typename T>
using Acc = typename AccumulatorOf<T>::Type;

// 16 bytes of 2-byte floats: 8 per load.
template <>
struct Vec16<__half> {
  using Type = uint4;
  static constexpr int kWidth = 8;
};
template <>
struct Vec16<__nv_bfloat16> {
  using Type = uint4;
  static constexpr int kWidth = 8;
};

__host__ __device__ __forceinline__ float Widen(float x) { return x; }
__host__ __device__ __forceinline__ double Widen(double x) { return x; }
__host__ __device__ __forceinline__ float Widen(__half x) { return __half2float(x); }
__host__ __device__ __forceinline__ float Widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// An accumulated value as the output type: rounded to nearest even for the
// 16-bit types (beyond the largest finite value: +-inf; NaN stays NaN).
template <typename Out, typename A>
__host__ __device__ __forceinline__ Out Narrow(A v) {
  if constexpr (std::is_same_v<Out, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return Out(v);
  }
}

}  // namespace gpucompute::kernels::cuda
