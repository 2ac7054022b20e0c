// The server's device flags (--backend, --devices and the CUDA backend's
// settings, --cpu_workers) and the devices they open.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/device.h"

namespace gpucompute::server {

struct Backend {
  kernels::Backend kind = kernels::Backend::kCpu;
  std::vector<std::unique_ptr<Device>> devices;
};

// Every device flag within its bounds, whichever backend --backend picks
// (so that a bad value stops start-up before anything slow starts); the
// error names the flag and the numbers.
absl::Status CheckBackendFlags();

// The devices --backend asks for: the GPUs (auto, cuda) or, when none is
// usable and the choice is auto, or by --backend=cpu, the CPU. Errors name
// the flag at fault, or say why --backend=cuda found no GPU. The CPU does
// not measure the ceilings `cpu_given` holds (> 0).
absl::StatusOr<Backend> OpenBackendFromFlags(const Ceilings& cpu_given = {});

}  // namespace gpucompute::server
