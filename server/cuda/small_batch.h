// Small requests of one op, dtype, shape and variant run as one batch on one
// slot: their inputs gathered into pinned staging and uploaded in one copy
// (or read there, by a zero-copy variant), one kernel launch over all of
// them where the variant has a batched form (else a kernel each), the
// results downloaded in one copy, and one host wait for all of them.
// Replayed from a CUDA graph, that is one launch, and members' separate
// kernels run side by side on the GPU. What a batch saves is the
// per-request copies, launches, events and waits that dominate a small
// request on a GPU.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/cuda/health.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// How many jobs shaped like `job` one batch holds: as many as the slot's
// scratch (less a workspace for each of up to `max_branches` branches,
// unless the workspace is too large for it and the members share the
// slot's own) and a staging chunk fit; 0 when the job reads or writes
// anything but host memory (tensors, pinned regions), which a batch does
// not gather.
int SmallBatchCapacity(const ComputeJob& job, int max_branches);

// Runs `jobs` (at most SmallBatchCapacity of the first, all of its shape
// and variant) on `slot`; a zero-copy variant reads and writes host memory
// when one job's inputs and result are at most `zero_copy_bytes`, as a
// request alone does. One result per job: a job stopped before its kernel,
// or whose launch fails, ends alone. An error of the batch's own copies or
// wait is returned for all.
absl::StatusOr<std::vector<absl::StatusOr<StageTimes>>> ExecuteSmallBatch(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, Slot& slot,
    HostCopyPool& copier, int64_t zero_copy_bytes);

// Runs `jobs` in groups of at most `capacity` (SmallBatchCapacity of the
// first) on `slot`, one result per job; errors go through `health`, which
// takes the device out of service after a fatal one.
std::vector<absl::StatusOr<StageTimes>> ExecuteSmallBatches(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, int capacity,
    Slot& slot, HostCopyPool& copier, int64_t zero_copy_bytes, DeviceHealth& health);

}  // namespace gpucompute::server::cuda
