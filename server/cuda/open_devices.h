// Opening the GPUs as Devices. In a build without CUDA, OpenCudaDevices
// reports why none can be opened.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// How a thread waits for its stream work to finish (--cuda_host_wait).
enum class HostWait {
  kAuto,  // CUDA's own choice: spin while the host has more cores than active contexts
  kSpin,
  kYield,  // spin, giving the core to any thread ready to run
  kBlock,  // sleep until the GPU's interrupt
};

struct CudaDeviceOptions {
  std::string devices = "all";          // "all" or a list such as "0,1"
  int streams_per_device = 8;           // jobs each GPU runs at once
  double device_memory_fraction = 0.9;  // cap of the pooled device memory
  // Graphs of small batches each stream keeps for replay (0: launch each
  // member's kernels one by one).
  int batch_graphs_per_stream = 64;
  // Streams a small batch's graph fans its members out over, so that their
  // kernels run side by side on the GPU (1: one after another).
  int batch_branches = 8;
  // Graphs of small requests each stream keeps (per variant, shape and
  // buffers, captured when seen a second time), replayed with one launch
  // (0: queue each request's copies, kernels and marks one by one).
  int request_graphs_per_stream = 64;
  // Device memory of freed small tensors each GPU keeps for the next ones
  // (tensor_blocks.h); at most 1/64 of the pool cap, 0 keeps none.
  int64_t tensor_block_cache_bytes = int64_t{256} << 20;
  // A small request's host bytes (inputs and result) up to which a variant
  // of plain loads and stores (Variant::zero_copy) reads and writes them in
  // pinned host memory instead of copying them; 0: always copy.
  int64_t zero_copy_bytes = int64_t{64} << 10;
  // Profile's hardware counters (CUPTI's range profiler, see cupti_counters.h).
  bool profile_counters = true;                  // false: rows say they are turned off
  std::string cupti_library = "libcupti.so.13";  // opened at the first counter read
  int profile_counter_max_passes = 32;           // replays of one launch at most
  HostWait host_wait = HostWait::kAuto;
};

// The usable GPUs, or why there are none (no driver, no device, ...).
absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(
    const CudaDeviceOptions& options);

}  // namespace gpucompute::server
