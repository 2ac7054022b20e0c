// Profile's counter pass on a GPU: after every variant has been timed, each
// correct one is replayed under the hardware-counter profiler, with the L2
// flushed before each replay as before each timed run, and left clean, so
// that the range's DRAM counters hold no write-back of earlier work.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gpucompute/kernels/variant.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// Fills each ok row's counters (or counters_note) in `results`. `flush`:
// `flush_bytes` (a multiple of 16) of device memory to flush the L2 with
// before each replay, or null.
// Returns only an error of a launch (which the caller treats as a device
// error); the profiler's own failures become the rows' notes.
absl::Status ReadProfileCounters(CounterReader& reader, const kernels::Problem& p,
                                 const kernels::Buffers& buffers, Slot& slot, void* flush,
                                 int64_t flush_bytes, const StopRequested& stop,
                                 std::vector<VariantMeasurement>& results);

}  // namespace gpucompute::server::cuda
