// A build without the CUDA toolkit: there are no GPU devices to open.
#include "server/cuda/open_devices.h"

namespace gpucompute::server {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(const CudaDeviceOptions&) {
  return absl::UnavailableError("no GPU support in this build (GPUCOMPUTE_WITH_CUDA=OFF)");
}

}  // namespace gpucompute::server
