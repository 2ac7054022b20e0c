// A batch's kernels through its variant's batched form
// (kernels::Variant::launch_batch): the members' blocks in one launch, up to
// max_batch_members a launch, each member's result bit for bit what its own
// launch writes. Small batches (host memory gathered into a slot) and
// batches on tensors both start here and launch one by one what it leaves.
#pragma once

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::server::cuda {

struct BatchedLaunches {
  size_t taken = 0;    // members [0, taken) are launched
  int launches = 0;    // kernel launches that took them
  absl::Status error;  // the failed launch of the members from `taken` on
};

// Launches `members` (buffers of one `problem` each, no workspace) on
// ctx.stream in launches of the variant's batched form, from the front,
// until one fails or the form does not take the next group. Takes none
// where the variant has no batched form, needs a workspace, or there are
// fewer than two members.
BatchedLaunches LaunchBatchedForm(const kernels::Variant& variant, const kernels::Problem& problem,
                                  std::span<const kernels::Buffers> members,
                                  const kernels::LaunchContext& ctx);

}  // namespace gpucompute::server::cuda
