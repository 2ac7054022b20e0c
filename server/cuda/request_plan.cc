#include "server/cuda/request_plan.h"

#include "server/cuda/slot.h"

namespace gpucompute::server::cuda {

Input InputOf(const HostPieces& host, bool pinned, const ResidentMemory* resident, int64_t bytes,
              int ordinal) {
  Input in;
  in.bytes = bytes;
  if (resident != nullptr) {
    in.resident = static_cast<const CudaResidentMemory*>(resident);
    in.source = in.resident->ordinal() == ordinal ? Source::kResident : Source::kPeer;
  } else if (bytes > 0) {
    in.source = Source::kHost;
    in.host = &host;
    in.pinned = pinned;
  }
  return in;
}

RequestPlan PlanOf(const ComputeJob& job, int ordinal) {
  const kernels::Problem& p = job.problem;
  RequestPlan plan;
  plan.a = InputOf(job.a, job.a_pinned, job.a_resident, kernels::InputABytes(p), ordinal);
  plan.b = InputOf(job.b, job.b_pinned, job.b_resident, kernels::InputBBytes(p), ordinal);
  plan.out = kernels::OutputBytes(p);
  plan.out_resident = job.out_resident != nullptr;
  plan.out_pinned = !plan.out_resident && job.out_pinned;
  plan.workspace = int64_t(job.variant->WorkspaceBytes(p));
  plan.workspace_in_slot = plan.workspace <= Slot::kWorkspaceBytes;
  return plan;
}

bool ServedAsSmall(const RequestPlan& plan) {
  return plan.Total() <= Slot::kScratchBytes && !plan.peer() && !plan.pinned();
}

}  // namespace gpucompute::server::cuda
