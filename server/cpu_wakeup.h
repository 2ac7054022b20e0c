// --cpu_wakeup_latency_us: a bound on how long the host's cores take to wake
// from idle, held while the server runs (Linux PM QoS, /dev/cpu_dma_latency).
//
// A lone request's round trip wakes a sleeping thread on each side of the
// socket. On a host whose idle cores drop into deep sleep states, each such
// wake-up costs tens of microseconds more the longer the core has slept, so
// a request that keeps the GPU busy for a few milliseconds pays more
// transport than a no-op call does. The bound keeps every core in shallow
// idle states: lower latency for everything on the host, at the cost of
// power.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace gpucompute::server {

class CpuWakeupLatency {
 public:
  static constexpr char kDefaultPath[] = "/dev/cpu_dma_latency";

  // Asks the kernel, through `path`, to keep the cores' wake-up latency at
  // or under `microseconds` until the returned object is destroyed (the
  // request lasts as long as the file stays open). Fails, naming the file
  // and why, where it cannot be written: it needs root, or a container
  // given the device.
  static absl::StatusOr<std::unique_ptr<CpuWakeupLatency>> Hold(
      int32_t microseconds, const std::string& path = kDefaultPath);

  CpuWakeupLatency(const CpuWakeupLatency&) = delete;
  CpuWakeupLatency& operator=(const CpuWakeupLatency&) = delete;
  ~CpuWakeupLatency();

 private:
  explicit CpuWakeupLatency(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace gpucompute::server
