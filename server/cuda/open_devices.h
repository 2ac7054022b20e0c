// Opening the GPUs as Devices. In a build without CUDA, OpenCudaDevices
// reports why none can be opened.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/device.h"

namespace gpucompute::server {

struct CudaDeviceOptions {
  std::string devices = "all";          // "all" or a list such as "0,1"
  int streams_per_device = 4;           // jobs each GPU runs at once
  double device_memory_fraction = 0.9;  // cap of the pooled device memory
  // Graphs of small batches each stream keeps for replay (0: launch each
  // member's kernels one by one).
  int batch_graphs_per_stream = 64;
  // Profile's hardware counters (CUPTI's range profiler, see cupti_counters.h).
  bool profile_counters = true;                  // false: rows say they are turned off
  std::string cupti_library = "libcupti.so.13";  // opened at the first counter read
  int profile_counter_max_passes = 32;           // replays of one launch at most
};

// The usable GPUs, or why there are none (no driver, no device, ...).
absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(
    const CudaDeviceOptions& options);

}  // namespace gpucompute::server
