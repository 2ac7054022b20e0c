// The server's shared-memory flags (--allow_shared_memory and its bounds).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "server/engine/shared_memory.h"

namespace gpucompute::server {

// The bounds within range (whether shared memory is on or not, so that a
// flag file that starts a server without it starts one with it); the error
// names the flag and the numbers.
absl::Status CheckSharedMemoryFlags();

// The registry the flags ask for, pinning through `pinner` (a GPU; the CPU
// pins nothing); null when --allow_shared_memory is off.
std::unique_ptr<SharedMemoryRegistry> SharedMemoryFromFlags(Device* pinner);

}  // namespace gpucompute::server
