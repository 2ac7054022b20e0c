// Small requests of one op, dtype, shape and variant run as one batch on one
// slot: their inputs gathered into pinned staging and uploaded in one copy,
// a kernel each on the slot's stream, the results downloaded in one copy,
// and one host wait for all of them. What a batch saves is the per-request
// copies, events and waits that dominate a small request on a GPU.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/cuda/health.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// How many jobs shaped like `job` one batch holds: as many as the slot's
// scratch and a staging chunk fit; 0 when the job reads or writes anything
// but host memory (tensors, pinned regions), which a batch does not gather.
int SmallBatchCapacity(const ComputeJob& job);

// Runs `jobs` (at most SmallBatchCapacity of the first, all of its shape
// and variant) on `slot`. One result per job: a job stopped before its
// kernel, or whose launch fails, ends alone. An error of the batch's own
// copies or wait is returned for all.
absl::StatusOr<std::vector<absl::StatusOr<StageTimes>>> ExecuteSmallBatch(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, Slot& slot,
    HostCopyPool& copier);

// Runs `jobs` in groups of at most `capacity` (SmallBatchCapacity of the
// first) on `slot`, one result per job; errors go through `health`, which
// takes the device out of service after a fatal one.
std::vector<absl::StatusOr<StageTimes>> ExecuteSmallBatches(absl::Span<const ComputeJob> jobs,
                                                            absl::Span<const StopRequested> stops,
                                                            int capacity, Slot& slot,
                                                            HostCopyPool& copier,
                                                            DeviceHealth& health);

}  // namespace gpucompute::server::cuda
