// Small requests that read tensors on one GPU and keep their results there,
// run as one batch on one slot: one kernel launch over all members where
// the variant has a batched form (kernels::Variant::launch_batch), else a
// kernel each, one after another on the slot's stream; between one pair of
// marks, with one host wait for all. Nothing is copied. A batch of n costs
// the host one launch (or n), two event records and one wait, where the n
// requests alone cost 3n driver calls and n waits. (A graph of it would
// name every member's new tensor, so none is captured.)
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/cuda/health.h"
#include "server/cuda/slot.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// Whether `job` runs in such a batch on the GPU numbered `ordinal`: its
// operands are tensors there, its result is kept there, and its workspace,
// if any, fits the slot's own.
bool RunsOnDevice(const ComputeJob& job, int ordinal);

// Runs `jobs` (each RunsOnDevice, all of one problem and variant) on
// `slot`, one result per job, each the batch's kernel time. A job stopped
// before its kernel, or whose launch fails, ends alone; an error of the
// marks or the wait is every launched job's. Errors go through `health`.
std::vector<absl::StatusOr<StageTimes>> ExecuteOnDeviceBatch(absl::Span<const ComputeJob> jobs,
                                                             absl::Span<const StopRequested> stops,
                                                             Slot& slot, DeviceHealth& health);

}  // namespace gpucompute::server::cuda
