// What an operator reads about a GPU itself (utilization, memory by anyone,
// power, temperature, clocks, throttling, bus traffic), behind an interface:
// the server reads NVML (nvml_telemetry.h), tests a fake.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace gpucompute::server {

// One GPU at one moment. A field stays empty when the driver does not give
// it (not supported by the part, no permission, the call failed): its gauge
// is then absent, never a made-up zero.
struct GpuReading {
  std::optional<double> utilization;         // 0-1: a kernel ran during the sample period
  std::optional<double> memory_utilization;  // 0-1: device memory was read or written
  std::optional<int64_t> memory_total_bytes;
  std::optional<int64_t> memory_used_bytes;            // by every process and the driver
  std::optional<int64_t> memory_used_by_server_bytes;  // by this process
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;  // the enforced limit
  std::optional<double> temperature_celsius;
  std::optional<double> sm_clock_hertz;
  std::optional<uint64_t> throttle_reasons;  // NVML's clock throttle (event) reason bits
  std::optional<double> pcie_tx_bytes_per_second;
  std::optional<double> pcie_rx_bytes_per_second;
  std::optional<int64_t> nvlink_tx_bytes;  // since the driver loaded, every link
  std::optional<int64_t> nvlink_rx_bytes;
};

class GpuTelemetry {
 public:
  virtual ~GpuTelemetry() = default;
  // The GPU at `pci_bus_id` ("00000000:3B:00.0") now; an error when that GPU
  // cannot be found or read at all. Slow calls are allowed (PCIe counters
  // take 20 ms each): the caller is a sampling thread, never a request.
  virtual absl::StatusOr<GpuReading> Read(const std::string& pci_bus_id) = 0;
};

}  // namespace gpucompute::server
