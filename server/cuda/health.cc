#include "server/cuda/health.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace gpucompute::server::cuda {

absl::Status DeviceHealth::TakeOutOfService(absl::string_view why) {
  healthy_.store(false);
  return absl::InternalError(absl::StrCat(device_name_, " taken out of service: ", why));
}

absl::Status DeviceHealth::AfterError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInternal) return status;
  cudaGetLastError();  // clears non-sticky errors
  const cudaError_t sticky = cudaDeviceSynchronize();
  if (sticky != cudaSuccess) {
    healthy_.store(false);
    return absl::InternalError(absl::StrCat(status.message(), "; ", device_name_,
                                            " taken out of service: ", cudaGetErrorString(sticky)));
  }
  return status;
}

}  // namespace gpucompute::server::cuda
