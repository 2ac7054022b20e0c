// Host allocation tuned for large payloads: see gpucompute/common/host_memory.h.
// Clients that send or receive large matrices repeatedly call it once at
// start-up, before threads start.
#pragma once

#include "gpucompute/common/host_memory.h"

namespace gpucompute {

using common::RetainLargeHostAllocations;

}  // namespace gpucompute
