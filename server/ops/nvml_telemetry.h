// GpuTelemetry through NVML, the driver's management library, loaded at run
// time so that a host without it (or a CPU-only build) still serves.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/ops/gpu_telemetry.h"
#include "server/ops/nvml_abi.h"

namespace gpucompute::server {

// The NVML entry points the gauges call. The first five are required; any
// other may be null (an older driver), and its readings are then absent.
struct NvmlApi {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::HandleByPciBusIdFn handle_by_pci_bus_id = nullptr;
  nvml::UtilizationRatesFn utilization_rates = nullptr;
  nvml::MemoryInfoFn memory_info = nullptr;
  nvml::PowerFn power_usage = nullptr;
  nvml::PowerFn enforced_power_limit = nullptr;
  nvml::TemperatureFn temperature = nullptr;
  nvml::ClockInfoFn clock_info = nullptr;
  nvml::ThrottleReasonsFn throttle_reasons = nullptr;
  nvml::PcieThroughputFn pcie_throughput = nullptr;
  nvml::RunningProcessesFn running_processes = nullptr;
  nvml::FieldValuesFn field_values = nullptr;
  // Keeps the library loaded while the pointers are in use (null for a
  // table of functions linked into the process, as tests make).
  std::shared_ptr<void> library;
};

// dlopen(`library`) (normally "libnvidia-ml.so.1") and dlsym of each entry
// point; an error naming the library when it or a required entry is missing.
absl::StatusOr<NvmlApi> LoadNvml(const std::string& library);

// Telemetry through `api`: nvmlInit now (its error when the driver is not
// usable), nvmlShutdown when destroyed. `pid` is this process, whose own
// device memory is read from the list of running compute processes.
absl::StatusOr<std::unique_ptr<GpuTelemetry>> OpenNvmlTelemetry(NvmlApi api, int64_t pid);

}  // namespace gpucompute::server
