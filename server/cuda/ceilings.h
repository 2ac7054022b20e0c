// The roofline of a GPU, measured at start-up: device-to-device copy
// bandwidth, read-only bandwidth (a streaming read kernel), cuBLAS SGEMM
// (FP32 without and with TF32) and DGEMM rates, and the L2's size.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// On `slot` (of the current device), with 1 GiB of its own device memory
// for the time it runs; counts those cudaMalloc calls.
absl::StatusOr<Ceilings> MeasureCeilings(Slot& slot, std::atomic<int64_t>& device_malloc_calls);

}  // namespace gpucompute::server::cuda
