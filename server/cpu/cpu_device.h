// The CPU backend: runs the CPU variants of the kernel registry.
#pragma once

#include <memory>
#include <string_view>

#include "server/engine/device.h"

namespace gpucompute::server {

// The CPU device's name: in its description, and the entry of a --ceilings
// file that gives its figures.
inline constexpr std::string_view kCpuDeviceName = "cpu";

// `workers`: jobs run at once (0: one per hardware thread). Measures its
// ceilings (memcpy and read bandwidth, multiply-add rate) when created,
// except those `given` holds (> 0: from a --ceilings file): the measurement
// takes every core for about a second, so a server told its ceilings
// starts without it.
std::unique_ptr<Device> MakeCpuDevice(int workers, const Ceilings& given = {});

}  // namespace gpucompute::server
