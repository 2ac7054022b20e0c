// CUDA and cuBLAS errors as absl::Status, the one conversion every CUDA file
// uses: out of memory is RESOURCE_EXHAUSTED (the request may succeed later),
// anything else INTERNAL with the error's name and text.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::kernels::cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  if (err == cudaErrorMemoryAllocation) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": out of device memory (", cudaGetErrorString(err), ")"));
  }
  return absl::InternalError(
      absl::StrCat(what, ": CUDA error ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

inline absl::Status CublasStatus(cublasStatus_t err, const char* what) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (err == CUBLAS_STATUS_ALLOC_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": cuBLAS could not allocate device memory (", cublasGetStatusString(err), ")"));
  }
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(err), ": ",
                                          cublasGetStatusString(err)));
}

}  // namespace gpucompute::kernels::cuda

#define GPUCOMPUTE_RETURN_IF_CUDA_ERROR(expr, what)                                        \
  do {                                                                                     \
    if (absl::Status _s = ::gpucompute::kernels::cuda::CudaStatus((expr), what); !_s.ok()) \
      return _s;                                                                           \
  } while (0)
