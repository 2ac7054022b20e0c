#include "server/cuda/batch_graphs.h"

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

BatchGraphCache::~BatchGraphCache() {
  for (auto& [key, exec] : recent_) {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
}

absl::Status BatchGraphCache::Launch(const std::string& key, cudaStream_t stream,
                                     const std::function<absl::Status()>& enqueue) {
  if (capacity_ <= 0) return enqueue();
  auto found = by_key_.find(key);
  if (found == by_key_.end()) {
    if (auto s = Capture(key, stream, enqueue); !s.ok()) return s;
    found = by_key_.find(key);
  } else {
    recent_.splice(recent_.begin(), recent_, found->second);
    if (found->second->second == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("the launches of ", key, " could not be captured before"));
    }
    ++replayed_;
  }
  return CudaStatus(cudaGraphLaunch(found->second->second, stream), "cudaGraphLaunch");
}

void BatchGraphCache::Keep(const std::string& key, cudaGraphExec_t exec) {
  // The slot waits for each batch before the next, so a graph dropped here
  // has no launch in flight.
  if (int(recent_.size()) >= capacity_) {
    by_key_.erase(recent_.back().first);
    if (recent_.back().second != nullptr) cudaGraphExecDestroy(recent_.back().second);
    recent_.pop_back();
  }
  recent_.emplace_front(key, exec);
  by_key_[key] = recent_.begin();
}

absl::Status BatchGraphCache::Capture(const std::string& key, cudaStream_t stream,
                                      const std::function<absl::Status()>& enqueue) {
  // Thread-local: the other slots' threads go on allocating and waiting
  // while this one captures; only this thread's calls are checked.
  if (auto s = CudaStatus(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture");
      !s.ok()) {
    return s;
  }
  absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  // A batch whose launches cannot be captured is remembered as such and
  // launched the plain way from then on.
  if (!enqueued.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // a failed capture is not sticky: clear it
    Keep(key, nullptr);
    return enqueued.ok() ? CudaStatus(ended, "cudaStreamEndCapture") : enqueued;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();
    Keep(key, nullptr);
    return CudaStatus(made, "cudaGraphInstantiate");
  }
  Keep(key, exec);
  ++captured_;
  return absl::OkStatus();
}

}  // namespace gpucompute::server::cuda
