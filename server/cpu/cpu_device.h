// The CPU backend: runs the CPU variants of the kernel registry.
#pragma once

#include <memory>

#include "server/engine/device.h"

namespace gpucompute::server {

// `workers`: jobs run at once (0: one per hardware thread). Measures its
// ceilings (memcpy bandwidth, multiply-add rate) when created.
std::unique_ptr<Device> MakeCpuDevice(int workers);

}  // namespace gpucompute::server
