// 16 bytes of 2-byte floats for the reductions' vector loads (8 values a
// load); how each type is added up is cuda/accumulate.cuh's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/accumulate.cuh"
#include "cuda/cuda_util.h"

namespace gpucompute::kernels::cuda {

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

}  // namespace gpucompute::kernels::cuda
