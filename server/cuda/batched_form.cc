#include "server/cuda/batched_form.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

MemberLaunches LaunchEveryMember(const kernels::Variant& variant, const kernels::Problem& problem,
                                 std::span<const kernels::Buffers> members,
                                 const kernels::LaunchContext& ctx,
                                 absl::FunctionRef<absl::Status(size_t j)> launch_one) {
  const BatchedLaunches together = LaunchBatchedForm(variant, problem, members, ctx);
  MemberLaunches out;
  out.status.reserve(members.size());
  for (size_t j = 0; j < members.size(); ++j) {
    out.status.push_back(j < together.taken     ? absl::OkStatus()
                         : !together.error.ok() ? together.error
                                                : launch_one(j));
  }
  if (together.taken == members.size()) out.batched_launches = together.launches;
  return out;
}

std::string KernelLaunches(int launches) {
  if (launches <= 0) return "";
  if (launches == 1) return "one kernel launch";
  return absl::StrCat(launches, " kernel launches");
}

}  // namespace gpucompute::server::cuda
