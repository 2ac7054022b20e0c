// Element types as the matmul kernels accumulate them: float and double as
// themselves, FP16 and BF16 widened to float (products of 16-bit values are
// exact in float), and the sum rounded once to the output type at the end.
// In namespace matmul: kernels/cuda/reduce/accumulate.cuh declares its own
// Widen and AccumulatorOf in namespace cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

namespace gpucompute::kernels::cuda::matmul {

template <typename T>
struct Accumulator {
  using Type = T;
};
template <>
struct Accumulator<__half> {
  using Type = float;
};
template <>
struct Accumulator<__nv_bfloat16> {
  using Type = float;
};
template <typename T>
using AccumulatorOf = typename Accumulator<T>::Type;

__device__ __forceinline__ float Widen(float x) { return x; }
__device__ __forceinline__ double Widen(double x) { return x; }
__device__ __forceinline__ float Widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float Widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// The one rounding of a sum to the output type, to nearest even.
template <typename Out, typename Acc>
__device__ __forceinline__ Out Round(Acc x) {
  if constexpr (std::is_same_v<Out, __half>) {
    return __float2half_rn(x);
  } else if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return Out(x);
  }
}

// Zero of an input type (the 16-bit types have no constexpr conversion
// from int on every path).
template <typename T>
__device__ __forceinline__ T Zero() {
  if constexpr (std::is_same_v<T, __half>) {
    return __ushort_as_half(0);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __ushort_as_bfloat16(0);
  } else {
    return T(0);
  }
}

}  // namespace gpucompute::kernels::cuda::matmul
