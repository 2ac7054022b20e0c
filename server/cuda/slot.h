// What one request in flight uses on a GPU: its stream and cuBLAS handle,
// events marking its stages, a small device scratch area and pinned
// staging. Every piece is held by an owning handle, so a Slot that fails
// half-way through Create frees what it had made, and a Slot frees all of
// it when destroyed (with its device current).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "gpucompute/kernels/cuda_timer.h"
#include "gpucompute/kernels/variant.h"
#include "server/cuda/branches.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/graph_cache.h"
#include "server/cuda/staging.h"

namespace gpucompute::server::cuda {

// What a slot keeps besides its fixed buffers.
struct SlotOptions {
  int batch_graphs = 0;    // graphs of small batches kept (0: none)
  int request_graphs = 0;  // graphs of small requests kept (0: none)
  // Streams a captured batch's members run side by side on (1: one after
  // another on the slot's stream).
  int batch_branches = 1;
  // The device's counts of captures and replays, when given.
  GraphCounts* batch_counts = nullptr;
  GraphCounts* request_counts = nullptr;
};

class Slot {
 public:
  // Device memory kept for small requests, whose operands, result and
  // workspace all fit: they skip the pool and wait on the host only once.
  static constexpr int64_t kScratchBytes = int64_t{1} << 20;
  // A variant's workspace up to this size (cuBLAS asks for 32 MiB) is the
  // slot's own, allocated once: a request neither takes it from the pool
  // nor waits to give it back, and a small cuBLAS request fits the scratch.
  static constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;

  // Stage boundaries, recorded on the stream: upload begin -> kernel start
  // is the upload, kernel start -> kernel end the kernel, kernel end ->
  // downloaded the download (small requests, whose result lands in staging).
  enum class Mark { kUploadBegin, kKernelStart, kKernelEnd, kDownloaded };

  // On the current device; counts its cudaMalloc and cudaHostAlloc calls.
  static absl::StatusOr<std::unique_ptr<Slot>> Create(std::atomic<int64_t>& device_malloc_calls,
                                                      std::atomic<int64_t>& host_alloc_calls,
                                                      const SlotOptions& options = {});

  cudaStream_t stream() const { return stream_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }
  kernels::LaunchContext launch_context() const {
    return kernels::LaunchContext{stream(), cublas()};
  }
  char* scratch() const { return static_cast<char*>(scratch_.get()); }  // kScratchBytes
  void* workspace() const { return workspace_.get(); }                  // kWorkspaceBytes
  StagingBuffers& staging() { return *staging_; }
  GraphCache& batch_graphs() { return *batch_graphs_; }
  // The side streams a batch's graph fans its members out over.
  Branches& batch_branches() { return batch_branches_; }
  // A request's graph is captured at its second sighting: a graph names the
  // pointers of the tensors a request reads, and the next request may name
  // others. (Requests keeping their output are never graphed.)
  GraphCache& request_graphs() { return *request_graphs_; }
  // Times launches for Profile and the ceilings.
  kernels::cuda::EventTimer& timer() { return timer_; }

  // `in_graph`: while the stream is captured, as a node of the graph (an
  // external event record), so that each replay records the mark.
  absl::Status Record(Mark mark, bool in_graph = false);
  // A small request's or batch's stream work, from its first mark to its
  // last: `up_bytes` from staging chunk 0 to the scratch, then its mark
  // (nothing when 0); `kernels` between the kernel marks; `down_bytes` from
  // `down_from` to staging chunk 1, then its mark (nothing when 0). The
  // first failure ends it. `in_graph` as for Record.
  absl::Status EnqueueStages(bool in_graph, size_t up_bytes, const void* down_from,
                             size_t down_bytes, absl::FunctionRef<absl::Status()> kernels);
  // Waits until `mark` has fired; `what` names the wait in an error.
  absl::Status WaitFor(Mark mark, const char* what);
  // Microseconds between two recorded marks that have fired.
  absl::StatusOr<int64_t> MicrosBetween(Mark from, Mark to) const;
  // Upload, compute and download times, once the marks have fired. A stage
  // whose marks were not recorded for this request (nothing went up, or
  // nothing came down) is 0: its events still hold an earlier request's.
  absl::StatusOr<StageTimes> Stages(bool uploaded = true, bool downloaded = true) const;

 private:
  Slot(UniqueStream stream, std::array<UniqueEvent, 4> marks, UniqueDeviceMemory scratch,
       UniqueDeviceMemory workspace, kernels::cuda::EventTimer timer, UniqueCublas cublas,
       std::unique_ptr<StagingBuffers> staging, const SlotOptions& options);

  cudaEvent_t event(Mark mark) const { return marks_[size_t(mark)].get(); }

  // Declared first, destroyed last: after everything used on it.
  UniqueStream stream_;
  std::array<UniqueEvent, 4> marks_;
  UniqueDeviceMemory scratch_;
  UniqueDeviceMemory workspace_;
  kernels::cuda::EventTimer timer_;
  UniqueCublas cublas_;
  std::unique_ptr<StagingBuffers> staging_;
  Branches batch_branches_;
  // Destroyed before the stream and the memory their graphs name.
  std::unique_ptr<GraphCache> batch_graphs_;
  std::unique_ptr<GraphCache> request_graphs_;
};

}  // namespace gpucompute::server::cuda
