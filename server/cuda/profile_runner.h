// Profile on a GPU: every listed variant runs on the same device-side random
// inputs, is checked against a float64 reference, and when correct is timed.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/health.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// Serves `job`, whose matrices are in host memory, as the device serves
// such a small request (CudaDevice::ExecuteSmall), on the slot RunProfile
// was given.
using ServeSmall = std::function<absl::StatusOr<StageTimes>(const ComputeJob& job)>;

// On `slot` (of the current device), with memory reserved from `memory`. A
// variant that fails to run is reported in its row, unless its error took
// the device out of service (`health`). An error returned here has not been
// through health.AfterError yet. For ProfileJob::time_as_served_from_host,
// a correct variant is timed through `serve_small` and its served result
// checked again.
absl::StatusOr<std::vector<VariantMeasurement>> RunProfile(
    const ProfileJob& job, const StopRequested& stop, Slot& slot, DeviceMemory& memory,
    HostCopyPool& copier, DeviceHealth& health, const ServeSmall& serve_small);

}  // namespace gpucompute::server::cuda
