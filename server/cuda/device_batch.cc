#include "server/cuda/device_batch.h"

#include "absl/strings/str_cat.h"
#include "server/cuda/batched_form.h"
#include "server/cuda/request_plan.h"

namespace gpucompute::server::cuda {

using Mark = Slot::Mark;

namespace {

// Launches the members `live` (indices into `jobs`, each with its
// `buffers`) on the slot's stream, one after another (they share the slot's
// workspace). A member whose launch fails ends with that error; `ran` marks
// the others. Returns how many launches of the batched form ran every live
// member, or 0 where some member had a launch of its own.
int LaunchTogether(absl::Span<const ComputeJob> jobs, const std::vector<size_t>& live,
                   const std::vector<kernels::Buffers>& buffers, Slot& slot, DeviceHealth& health,
                   std::vector<absl::StatusOr<StageTimes>>& results, std::vector<bool>& ran) {
  if (live.empty()) return 0;
  const ComputeJob& first = jobs[live.front()];
  const kernels::LaunchContext ctx = slot.launch_context();
  const MemberLaunches launched =
      LaunchEveryMember(*first.variant, first.problem, buffers, ctx, [&](size_t j) {
        return jobs[live[j]].variant->launch(jobs[live[j]].problem, buffers[j], ctx);
      });
  for (size_t j = 0; j < live.size(); ++j) {
    if (launched.status[j].ok()) {
      ran[live[j]] = true;
    } else {
      results[live[j]] = health.AfterError(launched.status[j]);
    }
  }
  return launched.batched_launches;
}

}  // namespace

bool RunsOnDevice(const ComputeJob& job, int ordinal) {
  if (job.variant == nullptr) return false;
  const RequestPlan plan = PlanOf(job, ordinal);
  return plan.a.source == Source::kResident &&
         (plan.b.source == Source::kResident || plan.b.source == Source::kAbsent) &&
         plan.out_resident && (plan.workspace == 0 || plan.workspace_in_slot);
}

std::vector<absl::StatusOr<StageTimes>> ExecuteOnDeviceBatch(absl::Span<const ComputeJob> jobs,
                                                             absl::Span<const StopRequested> stops,
                                                             Slot& slot, DeviceHealth& health) {
  const size_t n = jobs.size();
  std::vector<absl::StatusOr<StageTimes>> results(
      n, absl::CancelledError("request abandoned before its kernel ran"));
  if (auto s = slot.Record(Mark::kKernelStart); !s.ok()) {
    results.assign(n, health.AfterError(s));
    return results;
  }
  // The members still wanted, with their buffers.
  std::vector<size_t> live;
  std::vector<kernels::Buffers> buffers;
  for (size_t i = 0; i < n; ++i) {
    if (stops[i]()) continue;
    const ComputeJob& job = jobs[i];
    const size_t workspace = job.variant->WorkspaceBytes(job.problem);
    live.push_back(i);
    buffers.push_back(
        {job.a_resident->data(), job.b_resident != nullptr ? job.b_resident->data() : nullptr,
         job.out_resident->data(), workspace > 0 ? slot.workspace() : nullptr, workspace});
  }
  std::vector<bool> ran(n, false);
  const int launches = LaunchTogether(jobs, live, buffers, slot, health, results, ran);
  absl::Status s = slot.Record(Mark::kKernelEnd);
  if (s.ok()) s = slot.WaitFor(Mark::kKernelEnd, "batch kernel wait");
  absl::StatusOr<StageTimes> times = s.ok() ? slot.Stages(/*uploaded=*/false, /*downloaded=*/false)
                                            : absl::StatusOr<StageTimes>(s);
  if (!times.ok()) times = health.AfterError(times.status());
  if (times.ok() && launches > 0) {
    times->note = absl::StrCat("the batch ran as ", KernelLaunches(launches));
  }
  for (size_t i = 0; i < n; ++i) {
    if (ran[i]) results[i] = times;
  }
  return results;
}

}  // namespace gpucompute::server::cuda
