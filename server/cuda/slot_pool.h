// A device's slots, lent one per request: Acquire waits for a free one, and
// the lease gives it back when it ends.
#pragma once

#include "server/cuda/slot.h"
#include "server/engine/lease_pool.h"

namespace gpucompute::server::cuda {

using SlotPool = LeasePool<Slot>;

}  // namespace gpucompute::server::cuda
