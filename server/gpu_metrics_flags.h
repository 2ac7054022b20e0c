// The server's GPU gauge flags (--gpu_metrics_interval_ms, --nvml_library):
// which GPUs to watch and the sampler that reads them.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/device.h"
#include "server/ops/gpu_sampler.h"

namespace gpucompute::server {

// --gpu_metrics_interval_ms within 0 to 3600000, or the message saying not.
absl::Status CheckGpuMetricsFlags();

// A sampler of the GPUs among `devices`, as the flags ask; null when the
// gauges are off (the interval is 0, or no metrics endpoint reads them).
// Never fails the server: without NVML the sampler reports itself down
// and the log says why.
std::shared_ptr<GpuSampler> GpuSamplerFromFlags(const std::vector<std::unique_ptr<Device>>& devices,
                                                bool metrics_served);

}  // namespace gpucompute::server
