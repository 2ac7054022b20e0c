// The CPU backend: runs the CPU variants of the kernel registry.
#pragma once

#include <memory>

#include "server/engine/device.h"

namespace gpucompute::server {

// `workers`: jobs run at once (0: one per hardware thread). Measures its
// ceilings (memcpy and read bandwidth, multiply-add rate) when created,
// except those `given` holds (> 0: from a --ceilings file): the measurement
// takes every core for about a second, so a server told its ceilings
// starts without it.
std::unique_ptr<Device> MakeCpuDevice(int workers, const Ceilings& given = {});

}  // namespace gpucompute::server
