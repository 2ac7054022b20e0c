// One GPU as a Device: a slot (stream, cuBLAS handle, events, pinned
// staging) per concurrent request, pooled device memory behind a byte
// budget, and ceilings measured at start-up.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/cuda/open_devices.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal,
                                                       const CudaDeviceOptions& options);

}  // namespace gpucompute::server::cuda
