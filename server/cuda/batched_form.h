// A batch's kernels through its variant's batched form
// (kernels::Variant::launch_batch): the members' blocks in one launch, up to
// max_batch_members a launch, each member's result bit for bit what its own
// launch writes. Small batches (host memory gathered into a slot) and
// batches on tensors both start here and launch one by one what it leaves
// (LaunchEveryMember, or a small batch's graph branches).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
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

// How each member of a batch was launched.
struct MemberLaunches {
  std::vector<absl::Status> status;  // per member: ok = its kernel is enqueued
  int batched_launches = 0;          // launches of the batched form if it took every member, else 0
};

// Launches every member on ctx.stream, one after another: the batched form
// takes what it will (LaunchBatchedForm), and `launch_one(j)` launches each
// member j it left. A failed batched launch fails the members it left
// (none of their kernels is enqueued); a failed launch of one member fails
// that member alone.
MemberLaunches LaunchEveryMember(const kernels::Variant& variant, const kernels::Problem& problem,
                                 std::span<const kernels::Buffers> members,
                                 const kernels::LaunchContext& ctx,
                                 absl::FunctionRef<absl::Status(size_t j)> launch_one);

// What a batch's report says of its launches: "one kernel launch", "3 kernel
// launches", or "" for none.
std::string KernelLaunches(int launches);

}  // namespace gpucompute::server::cuda
