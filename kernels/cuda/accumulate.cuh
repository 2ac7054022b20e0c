// Element types as the kernels add them up: float and double in their own
// type; FP16 and BF16 widened to float (exact; products of two 16-bit values
// are exact in float too), accumulated in float, and rounded once, when the
// result is stored, to the output type (the input's, or float when a float32
// output is asked for). MIN and MAX stay exact: a 16-bit value widened and
// rounded back is itself. The MatMul and Reduce kernels share these.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

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

// Zero of an element type (the 16-bit types have no constexpr conversion
// from int on every path).
template <typename T>
__host__ __device__ __forceinline__ T Zero() {
  if constexpr (std::is_same_v<T, __half>) {
    return __ushort_as_half(0);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __ushort_as_bfloat16(0);
  } else {
    return T(0);
  }
}

}  // namespace gpucompute::kernels::cuda
