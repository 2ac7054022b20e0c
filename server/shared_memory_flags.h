// The server's shared-memory flags (--allow_shared_memory and its bounds).
#pragma once

#include <memory>

#include "server/engine/shared_memory.h"

namespace gpucompute::server {

// The registry the flags ask for, pinning through `pinner` (a GPU; the CPU
// pins nothing); null when --allow_shared_memory is off.
std::unique_ptr<SharedMemoryRegistry> SharedMemoryFromFlags(Device* pinner);

}  // namespace gpucompute::server
