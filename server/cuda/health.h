// Whether a GPU is in service, and the rule that takes it out: a CUDA error
// fails its own request only, unless it broke the context (a sticky error
// such as an illegal address); then the device leaves service for good.
#pragma once

#include <atomic>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpucompute::server::cuda {

class DeviceHealth {
 public:
  explicit DeviceHealth(std::string device_name) : device_name_(std::move(device_name)) {}

  // An atomic load, never a driver call: read on every admission.
  bool healthy() const { return healthy_.load(std::memory_order_relaxed); }

  // Takes the device out of service; INTERNAL saying so and why.
  absl::Status TakeOutOfService(absl::string_view why);

  // `status` as the request's result. An INTERNAL one makes the device check
  // its context (the current device must be this one): a sticky error takes
  // it out of service and says so in the result. Others pass unchanged.
  absl::Status AfterError(const absl::Status& status);

 private:
  const std::string device_name_;
  std::atomic<bool> healthy_{true};
};

}  // namespace gpucompute::server::cuda
