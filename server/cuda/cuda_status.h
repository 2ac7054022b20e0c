// CUDA errors as absl::Status: INTERNAL with the CUDA error name and text.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::server::cuda {

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
  return absl::InternalError(absl::StrCat(what, ": cuBLAS error ", cublasGetStatusName(err), ": ",
                                          cublasGetStatusString(err)));
}

}  // namespace gpucompute::server::cuda

#define GPUCOMPUTE_RETURN_IF_CUDA_ERROR(expr, what)                              \
  do {                                                                           \
    if (absl::Status _s = ::gpucompute::server::cuda::CudaStatus((expr), what);  \
        !_s.ok())                                                                \
      return _s;                                                                 \
  } while (0)
