#include "server/cuda/small_batch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/request_plan.h"

namespace gpucompute::server::cuda {
namespace {

using Mark = Slot::Mark;

// Where each job's buffers lie: inputs of job i at i * in_stride (b after
// a), all results after the inputs at i * out_stride, and one workspace the
// kernels share (they run one after another on the slot's stream).
struct Layout {
  int64_t a = 0, b = 0, out = 0, workspace = 0;  // bytes of one job
  int64_t in_stride = 0, out_stride = 0;
  explicit Layout(const ComputeJob& job) {
    const kernels::Problem& p = job.problem;
    a = kernels::InputABytes(p);
    b = kernels::InputBBytes(p);
    out = kernels::OutputBytes(p);
    workspace = int64_t(job.variant->WorkspaceBytes(p));
    in_stride = AlignedBytes(a) + AlignedBytes(b);
    out_stride = AlignedBytes(out);
  }
  int64_t outputs_at(int n) const { return n * in_stride; }
  int64_t workspace_at(int n) const { return n * (in_stride + out_stride); }
};

// What a batch's launches depend on besides the slot: the variant, the
// problem and how many members run.
std::string BatchKey(const ComputeJob& job, int members) {
  return absl::StrCat(LaunchKey(job), " x", members);
}

bool HostOnly(const ComputeJob& job) {
  return job.a_resident == nullptr && job.b_resident == nullptr && job.out_resident == nullptr &&
         !job.a_pinned && !job.b_pinned && !job.out_pinned && job.out != nullptr;
}

}  // namespace

int SmallBatchCapacity(const ComputeJob& job) {
  if (!HostOnly(job) || job.variant == nullptr) return 0;
  const Layout l(job);
  const int64_t room = Slot::kScratchBytes - AlignedBytes(l.workspace);
  if (room <= 0) return 0;
  int64_t n = room / (l.in_stride + l.out_stride);
  if (l.in_stride > 0) n = std::min<int64_t>(n, StagingBuffers::kChunkBytes / l.in_stride);
  n = std::min<int64_t>(n, StagingBuffers::kChunkBytes / l.out_stride);
  return int(n);
}

absl::StatusOr<std::vector<absl::StatusOr<StageTimes>>> ExecuteSmallBatch(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, Slot& slot,
    HostCopyPool& copier) {
  const int n = int(jobs.size());
  if (n == 0) return std::vector<absl::StatusOr<StageTimes>>{};
  if (n > SmallBatchCapacity(jobs.front())) {
    return absl::InternalError(absl::StrCat("a batch of ", n, " does not fit one slot (holds ",
                                            SmallBatchCapacity(jobs.front()), ")"));
  }
  const Layout l(jobs.front());
  StagingBuffers& staging = slot.staging();
  if (auto s = staging.WaitIdle(); !s.ok()) return s;
  char* up = staging.chunk(0);
  char* down = staging.chunk(1);
  char* dev = slot.scratch();

  std::vector<absl::StatusOr<StageTimes>> results(
      size_t(n), absl::CancelledError("request abandoned before its kernel ran"));
  // The members still wanted, packed: member j's buffers are the j-th, so a
  // batch's launches depend only on how many run, and a graph of them
  // serves every later batch of that size.
  std::vector<int> members;
  members.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    if (stops[i]()) continue;
    char* in = up + int64_t(members.size()) * l.in_stride;
    copier.Gather(in, jobs[i].a);  // small: on this thread
    if (l.b > 0) copier.Gather(in + AlignedBytes(l.a), jobs[i].b);
    members.push_back(i);
  }
  const int live = int(members.size());
  if (live == 0) return results;
  if (auto s = slot.Record(Mark::kUploadBegin); !s.ok()) return s;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(dev, up, size_t(live * l.in_stride), cudaMemcpyHostToDevice, slot.stream()),
      "batch upload cudaMemcpyAsync");
  if (auto s = slot.Record(Mark::kKernelStart); !s.ok()) return s;
  char* outputs = dev + l.outputs_at(live);
  void* workspace = l.workspace > 0 ? dev + l.workspace_at(live) : nullptr;
  auto launch = [&](int j) {
    const ComputeJob& job = jobs[size_t(members[size_t(j)])];
    char* in = dev + j * l.in_stride;
    const kernels::Buffers buffers{in, l.b > 0 ? in + AlignedBytes(l.a) : nullptr,
                                   outputs + j * l.out_stride, workspace, size_t(l.workspace)};
    return job.variant->launch(job.problem, buffers, slot.launch_context());
  };
  const bool replayed =
      slot.batch_graphs().Launch(BatchKey(jobs.front(), live), slot.stream(), [&] {
        for (int j = 0; j < live; ++j) {
          if (auto s = launch(j); !s.ok()) return s;
        }
        return absl::OkStatus();
      });
  std::vector<bool> ran(size_t(live), replayed);
  if (!replayed) {
    // No graph (turned off, or the launches could not be captured): each
    // member's kernels on their own, a launch that fails failing its member.
    for (int j = 0; j < live; ++j) {
      if (auto s = launch(j); !s.ok()) {
        results[size_t(members[size_t(j)])] = s;
      } else {
        ran[size_t(j)] = true;
      }
    }
  }
  if (auto s = slot.Record(Mark::kKernelEnd); !s.ok()) return s;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(down, outputs, size_t(live * l.out_stride),
                                                  cudaMemcpyDeviceToHost, slot.stream()),
                                  "batch download cudaMemcpyAsync");
  if (auto s = slot.Record(Mark::kDownloaded); !s.ok()) return s;
  if (auto s = slot.WaitFor(Mark::kDownloaded, "batch download wait"); !s.ok()) return s;

  // Each member reports the batch's stages: the time it spent in them.
  auto times = slot.Stages();
  if (!times.ok()) return times.status();
  for (int j = 0; j < live; ++j) {
    if (!ran[size_t(j)]) continue;
    const int i = members[size_t(j)];
    std::memcpy(jobs[size_t(i)].out, down + j * l.out_stride, size_t(l.out));
    results[size_t(i)] = *times;
  }
  return results;
}

std::vector<absl::StatusOr<StageTimes>> ExecuteSmallBatches(absl::Span<const ComputeJob> jobs,
                                                            absl::Span<const StopRequested> stops,
                                                            int capacity, Slot& slot,
                                                            HostCopyPool& copier,
                                                            DeviceHealth& health) {
  std::vector<absl::StatusOr<StageTimes>> results;
  results.reserve(jobs.size());
  for (size_t start = 0; start < jobs.size(); start += size_t(capacity)) {
    const size_t n = std::min(jobs.size() - start, size_t(capacity));
    auto group = ExecuteSmallBatch(jobs.subspan(start, n), stops.subspan(start, n), slot, copier);
    if (!group.ok()) {
      const absl::Status s = health.AfterError(group.status());
      for (size_t i = 0; i < n; ++i) results.push_back(s);
      continue;
    }
    for (auto& r : *group) {
      results.push_back(r.ok() ? std::move(r)
                               : absl::StatusOr<StageTimes>(health.AfterError(r.status())));
    }
  }
  return results;
}

}  // namespace gpucompute::server::cuda
