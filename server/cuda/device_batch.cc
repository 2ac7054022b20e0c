#include "server/cuda/device_batch.h"

#include "server/cuda/request_plan.h"

namespace gpucompute::server::cuda {

using Mark = Slot::Mark;

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
  // One stream, one member at a time: they share the slot's workspace.
  std::vector<bool> ran(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (stops[i]()) continue;
    const ComputeJob& job = jobs[i];
    const size_t workspace = job.variant->WorkspaceBytes(job.problem);
    const kernels::Buffers buffers{
        job.a_resident->data(), job.b_resident != nullptr ? job.b_resident->data() : nullptr,
        job.out_resident->data(), workspace > 0 ? slot.workspace() : nullptr, workspace};
    if (auto s = job.variant->launch(job.problem, buffers, slot.launch_context()); !s.ok()) {
      results[i] = health.AfterError(s);
    } else {
      ran[i] = true;
    }
  }
  absl::Status s = slot.Record(Mark::kKernelEnd);
  if (s.ok()) s = slot.WaitFor(Mark::kKernelEnd, "batch kernel wait");
  absl::StatusOr<StageTimes> times = s.ok() ? slot.Stages(/*uploaded=*/false, /*downloaded=*/false)
                                            : absl::StatusOr<StageTimes>(s);
  if (!times.ok()) times = health.AfterError(times.status());
  for (size_t i = 0; i < n; ++i) {
    if (ran[i]) results[i] = times;
  }
  return results;
}

}  // namespace gpucompute::server::cuda
