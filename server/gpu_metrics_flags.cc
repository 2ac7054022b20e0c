#include "server/gpu_metrics_flags.h"

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/common/flag_checks.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/ops/nvml_telemetry.h"

ABSL_FLAG(int32_t, gpu_metrics_interval_ms, 1000,
          "how often a background thread reads the GPUs' utilization, memory, power, "
          "temperature, clocks, throttling and bus traffic through NVML for /metrics (never on "
          "a request's path; each reading takes about 50 ms per GPU); 0: no GPU gauges "
          "(0 to 3600000)");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "the NVML library the GPU gauges load at run time (the driver's); when it cannot be "
          "loaded the server serves without them");

namespace gpucompute::server {

absl::Status CheckGpuMetricsFlags() {
  constexpr int32_t kMaxIntervalMs = 3600000;  // an hour
  return common::CheckFlagRange("gpu_metrics_interval_ms",
                                absl::GetFlag(FLAGS_gpu_metrics_interval_ms), 0, kMaxIntervalMs);
}

std::shared_ptr<GpuSampler> GpuSamplerFromFlags(const std::vector<std::unique_ptr<Device>>& devices,
                                                bool metrics_served) {
  const int32_t interval_ms = absl::GetFlag(FLAGS_gpu_metrics_interval_ms);
  if (!metrics_served || interval_ms <= 0) {
    LogInfo(metrics_served ? "GPU gauges: off (--gpu_metrics_interval_ms=0)"
                           : "GPU gauges: off (no metrics endpoint)");
    return nullptr;
  }
  std::vector<WatchedGpu> gpus;
  for (const auto& device : devices) {
    if (device->description().pci_bus_id.empty()) continue;
    gpus.push_back({DeviceLabel(device->description().name), device->description().pci_bus_id});
  }
  const bool no_gpus = gpus.empty();
  absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry =
      absl::FailedPreconditionError("no GPU in use");
  if (!no_gpus) {
    auto api = LoadNvml(absl::GetFlag(FLAGS_nvml_library));
    telemetry = api.ok() ? OpenNvmlTelemetry(std::move(*api), int64_t(getpid())) : api.status();
  }
  auto sampler = std::make_shared<GpuSampler>(std::move(telemetry), std::move(gpus),
                                              absl::Milliseconds(interval_ms));
  const std::string problem = sampler->problem();
  if (problem.empty() || problem == "not sampled yet") {
    LogInfo(absl::StrCat("GPU gauges: NVML, every ", interval_ms, " ms"));
  } else if (no_gpus) {
    LogInfo("GPU gauges: none (no GPU in use)");
  } else {
    LogWarning(absl::StrCat("GPU gauges: none (", problem, "); serving without them"));
  }
  return sampler;
}

}  // namespace gpucompute::server
