#include "server/cuda/small_batch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/batched_form.h"
#include "server/cuda/branches.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/request_plan.h"
#include "server/engine/work_key.h"

namespace gpucompute::server::cuda {
namespace {

using Mark = Slot::Mark;

// Where each job's buffers lie: inputs of job i at i * in_stride (b after
// a), all results after the inputs at i * out_stride, and a workspace per
// branch (the members of one branch run one after another and share it).
// A workspace too large for the scratch (cuBLAS asks for 32 MiB) is the
// slot's own, and the members all take one branch. Staging holds inputs
// and results at the same strides from its chunks' starts.
struct Layout {
  int64_t a = 0, b = 0, out = 0, workspace = 0;  // bytes of one job
  int64_t in_stride = 0, out_stride = 0;
  int branches = 1;  // at most this many run side by side
  bool workspace_in_slot = false;
  Layout(const ComputeJob& job, int max_branches) {
    const kernels::Problem& p = job.problem;
    a = kernels::InputABytes(p);
    b = kernels::InputBBytes(p);
    out = kernels::OutputBytes(p);
    workspace = int64_t(job.variant->WorkspaceBytes(p));
    in_stride = AlignedBytes(a) + AlignedBytes(b);
    out_stride = AlignedBytes(out);
    branches = std::max(1, max_branches);
    // Workspaces take at most half the scratch: fewer branches, not fewer
    // members, for a variant that needs much.
    if (AlignedBytes(workspace) > Slot::kScratchBytes / 2) {
      workspace_in_slot = true;
      branches = 1;
    } else if (workspace > 0) {
      branches =
          int(std::clamp<int64_t>(Slot::kScratchBytes / 2 / AlignedBytes(workspace), 1, branches));
    }
  }
  int64_t outputs_at(int n) const { return n * in_stride; }
  // The workspace of `branch`, in `slot`, for a batch of `n` members.
  void* workspace_of(const Slot& slot, int n, int branch) const {
    if (workspace == 0) return nullptr;
    if (workspace_in_slot) return slot.workspace();
    return slot.scratch() + n * (in_stride + out_stride) + branch * AlignedBytes(workspace);
  }
  // What the workspaces take of the scratch.
  int64_t workspaces() const { return workspace_in_slot ? 0 : branches * AlignedBytes(workspace); }
  // Whether the slot holds the workspace at all.
  bool fits() const { return !workspace_in_slot || workspace <= Slot::kWorkspaceBytes; }
};

// What a batch's work depends on besides the slot: the variant, the
// problem and how many members run (their buffers, whether they are read
// in place, and the branches they take follow from these).
std::string BatchGraphKey(const ComputeJob& job, int members) {
  return WorkKey(job.variant, job.problem, {members});
}

bool HostOnly(const ComputeJob& job) {
  return job.a_resident == nullptr && job.b_resident == nullptr && job.out_resident == nullptr &&
         !job.a_pinned && !job.b_pinned && !job.out_pinned && job.out != nullptr;
}

}  // namespace

int SmallBatchCapacity(const ComputeJob& job, int max_branches) {
  if (!HostOnly(job) || job.variant == nullptr) return 0;
  const Layout l(job, max_branches);
  const int64_t room = Slot::kScratchBytes - l.workspaces();
  if (room <= 0 || !l.fits()) return 0;
  int64_t n = room / (l.in_stride + l.out_stride);
  if (l.in_stride > 0) n = std::min<int64_t>(n, StagingBuffers::kChunkBytes / l.in_stride);
  n = std::min<int64_t>(n, StagingBuffers::kChunkBytes / l.out_stride);
  return int(n);
}

absl::StatusOr<std::vector<absl::StatusOr<StageTimes>>> ExecuteSmallBatch(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, Slot& slot,
    HostCopyPool& copier, int64_t zero_copy_bytes) {
  const int n = int(jobs.size());
  if (n == 0) return std::vector<absl::StatusOr<StageTimes>>{};
  Branches& branches = slot.batch_branches();
  const int capacity = SmallBatchCapacity(jobs.front(), branches.count());
  if (n > capacity) {
    return absl::InternalError(
        absl::StrCat("a batch of ", n, " does not fit one slot (holds ", capacity, ")"));
  }
  const Layout l(jobs.front(), branches.count());
  StagingBuffers& staging = slot.staging();
  if (auto s = staging.WaitIdle(); !s.ok()) return s;
  char* up = staging.chunk(0);
  char* down = staging.chunk(1);
  char* dev = slot.scratch();

  std::vector<absl::StatusOr<StageTimes>> results(
      size_t(n), absl::CancelledError("request abandoned before its kernel ran"));
  // The members still wanted, packed: member j's buffers are the j-th, so a
  // batch's work depends only on how many run, and a graph of it serves
  // every later batch of that size.
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

  // As a request alone: a variant of plain loads and stores reads its
  // inputs where they were gathered and writes its result into staging
  // (the same kernel on the same bytes, so the same bits), and the batch
  // skips both copies.
  const int64_t member_bytes = l.in_stride + l.out;
  const bool zero_copy = jobs.front().variant->zero_copy && member_bytes <= zero_copy_bytes;
  const char* inputs = zero_copy ? up : dev;
  char* outputs = zero_copy ? down : dev + l.outputs_at(live);
  // Member j's buffers in the staging; a batched form needs no workspace.
  auto member = [&](int j, void* workspace) -> kernels::Buffers {
    const char* in = inputs + j * l.in_stride;
    return {in, l.b > 0 ? in + AlignedBytes(l.a) : nullptr, outputs + j * l.out_stride, workspace,
            workspace != nullptr ? size_t(l.workspace) : 0};
  };
  auto launch = [&](int j, int branch, cudaStream_t stream) {
    const ComputeJob& job = jobs[size_t(members[size_t(j)])];
    return job.variant->launch(job.problem, member(j, l.workspace_of(slot, live, branch)),
                               kernels::LaunchContext{stream, slot.cublas()});
  };
  // The batch's stream work from its first mark to its last: where the
  // variant has a batched form, the members it takes in one kernel launch
  // (a few for a batch past its max_batch_members), then the members it
  // left. In a graph those fan out over the slot's branches and run side
  // by side, and any failure fails the capture; queued one by one they run
  // in turn on the slot's stream, and a launch that fails fails its member
  // alone.
  std::vector<bool> ran(size_t(live), false);
  int batched_launches = 0;  // launches of the batched form, when it took every member
  auto enqueue = [&](bool in_graph) -> absl::Status {
    return slot.EnqueueStages(
        in_graph, zero_copy ? 0 : size_t(live * l.in_stride), outputs,
        zero_copy ? 0 : size_t(live * l.out_stride), [&]() -> absl::Status {
          std::vector<kernels::Buffers> member_buffers;
          member_buffers.reserve(size_t(live));
          for (int j = 0; j < live; ++j) member_buffers.push_back(member(j, nullptr));
          const kernels::LaunchContext ctx{slot.stream(), slot.cublas()};
          if (!in_graph) {
            const MemberLaunches launched =
                LaunchEveryMember(*jobs.front().variant, jobs.front().problem, member_buffers, ctx,
                                  [&](size_t j) { return launch(int(j), 0, slot.stream()); });
            batched_launches = launched.batched_launches;
            for (int j = 0; j < live; ++j) {
              if (launched.status[size_t(j)].ok()) {
                ran[size_t(j)] = true;
              } else {
                results[size_t(members[size_t(j)])] = launched.status[size_t(j)];
              }
            }
            return absl::OkStatus();
          }
          const BatchedLaunches together =
              LaunchBatchedForm(*jobs.front().variant, jobs.front().problem, member_buffers, ctx);
          const int taken = int(together.taken);
          batched_launches = taken == live ? together.launches : 0;
          if (!together.error.ok()) return together.error;
          if (taken == live) return absl::OkStatus();
          return branches.FanOut(slot.stream(), live - taken, l.branches,
                                 [&](int j, int branch, cudaStream_t stream) {
                                   return launch(taken + j, branch, stream);
                                 });
        });
  };
  // The streams are made outside any capture; without them (or with replay
  // off) the members run one after another.
  if (slot.batch_graphs().enabled()) branches.Prepare().IgnoreError();
  const bool replayed = slot.batch_graphs().Launch(
      BatchGraphKey(jobs.front(), live), slot.stream(), [&] { return enqueue(true); },
      &batched_launches);
  if (replayed) {
    ran.assign(size_t(live), true);
  } else if (auto s = enqueue(false); !s.ok()) {
    // Nothing may still read the staging when the next batch fills it.
    cudaStreamSynchronize(slot.stream());
    return s;
  }
  if (auto s = zero_copy ? slot.WaitFor(Mark::kKernelEnd, "batch kernel wait")
                         : slot.WaitFor(Mark::kDownloaded, "batch download wait");
      !s.ok()) {
    return s;
  }

  // Each member reports the batch's stages: the time it spent in them.
  auto times = slot.Stages(!zero_copy, !zero_copy);
  if (!times.ok()) return times.status();
  if (zero_copy) times->note = "zero-copy: the kernels read and wrote host memory";
  const std::string one_launch = KernelLaunches(batched_launches);
  std::string said;
  if (replayed) {
    const int side_by_side = branches.Used(live, l.branches);
    said = absl::StrCat("the batch replayed from a CUDA graph ",
                        !one_launch.empty() ? absl::StrCat("as ", one_launch)
                        : side_by_side > 1  ? absl::StrCat("on ", side_by_side, " streams")
                                            : "on one stream");
  } else if (!one_launch.empty()) {
    said = absl::StrCat("the batch ran as ", one_launch);
  }
  if (!said.empty()) times->note = absl::StrCat(times->note, times->note.empty() ? "" : ", ", said);
  for (int j = 0; j < live; ++j) {
    if (!ran[size_t(j)]) continue;
    const int i = members[size_t(j)];
    std::memcpy(jobs[size_t(i)].out, down + j * l.out_stride, size_t(l.out));
    results[size_t(i)] = *times;
  }
  return results;
}

std::vector<absl::StatusOr<StageTimes>> ExecuteSmallBatches(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops, int capacity,
    Slot& slot, HostCopyPool& copier, int64_t zero_copy_bytes, DeviceHealth& health) {
  std::vector<absl::StatusOr<StageTimes>> results;
  results.reserve(jobs.size());
  for (size_t start = 0; start < jobs.size(); start += size_t(capacity)) {
    const size_t n = std::min(jobs.size() - start, size_t(capacity));
    auto group = ExecuteSmallBatch(jobs.subspan(start, n), stops.subspan(start, n), slot, copier,
                                   zero_copy_bytes);
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
