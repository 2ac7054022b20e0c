#include "server/cuda/batched_form.h"

#include <algorithm>

namespace gpucompute::server::cuda {

BatchedLaunches LaunchBatchedForm(const kernels::Variant& variant, const kernels::Problem& problem,
                                  std::span<const kernels::Buffers> members,
                                  const kernels::LaunchContext& ctx) {
  BatchedLaunches out;
  if (members.size() < 2 || !variant.launch_batch || variant.max_batch_members < 1 ||
      variant.WorkspaceBytes(problem) > 0) {
    return out;
  }
  const size_t most = size_t(variant.max_batch_members);
  while (out.taken < members.size()) {
    const size_t count = std::min(members.size() - out.taken, most);
    const absl::StatusOr<bool> launched =
        variant.launch_batch(problem, members.subspan(out.taken, count), ctx);
    if (!launched.ok()) {
      out.error = launched.status();
      return out;
    }
    if (!*launched) return out;  // no one-launch form for these buffers
    out.taken += count;
    ++out.launches;
  }
  return out;
}

}  // namespace gpucompute::server::cuda
