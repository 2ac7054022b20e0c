// --devices parsed into GPU ordinals, and each of those opened.
#include "server/cuda/open_devices.h"

#include <cuda_runtime.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/cuda/cuda_device.h"
#include "server/cuda/cupti_counters.h"

namespace gpucompute::server {
namespace {

// "all", or a comma-separated list of indices below `count`.
absl::StatusOr<std::vector<int>> ParseOrdinals(const std::string& devices, int count) {
  std::vector<int> ordinals;
  if (devices == "all") {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
    return ordinals;
  }
  for (absl::string_view part : absl::StrSplit(devices, ',', absl::SkipEmpty())) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0 || ordinal >= count) {
      return absl::InvalidArgumentError(absl::StrCat("--devices: \"", std::string(part),
                                                     "\" is not a GPU index in [0, ", count, ")"));
    }
    ordinals.push_back(ordinal);
  }
  return ordinals;
}

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(
    const CudaDeviceOptions& options) {
  cuda::ConfigureCuptiCounters({.enabled = options.profile_counters,
                                .library = options.cupti_library,
                                .max_passes = options.profile_counter_max_passes});
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    // Without a GPU the runtime blames the driver's version ("CUDA driver
    // version is insufficient"): say what is most likely missing first.
    const bool nothing_there = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice;
    return absl::UnavailableError(absl::StrCat(
        nothing_there ? "no GPU or driver found" : "no usable CUDA device",
        " (CUDA runtime: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err), ")"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device found");
  auto ordinals = ParseOrdinals(options.devices, count);
  if (!ordinals.ok()) return ordinals.status();
  std::vector<std::unique_ptr<Device>> devices;
  for (int ordinal : *ordinals) {
    auto device = cuda::OpenCudaDevice(ordinal, options);
    if (!device.ok()) return device.status();
    devices.push_back(std::move(*device));
  }
  return devices;
}

}  // namespace gpucompute::server
