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

std::string LaunchKey(const ComputeJob& job, std::initializer_list<int64_t> more) {
  const kernels::Problem& p = job.problem;
  // The variant by address: the registry's variants live as long as the
  // server, one object each.
  const int64_t words[] = {KeyWord(job.variant),
                           int64_t(p.op),
                           int64_t(p.dtype),
                           int64_t(p.float32_output),
                           p.m,
                           p.n,
                           p.k,
                           int64_t(p.reduce_op),
                           int64_t(p.reduce_axis)};
  std::string key;
  key.reserve(sizeof words + more.size() * sizeof(int64_t));
  key.append(reinterpret_cast<const char*>(words), sizeof words);
  for (const int64_t word : more) key.append(reinterpret_cast<const char*>(&word), sizeof word);
  return key;
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
