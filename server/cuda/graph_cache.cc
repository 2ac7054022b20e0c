#include "server/cuda/graph_cache.h"

namespace gpucompute::server::cuda {

GraphCache::~GraphCache() {
  for (Graph& g : recent_) {
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
}

bool GraphCache::Launch(const std::string& key, cudaStream_t stream,
                        const std::function<absl::Status()>& enqueue, int* tag) {
  if (capacity_ <= 0) return false;
  auto found = by_key_.find(key);
  if (found != by_key_.end()) {
    recent_.splice(recent_.begin(), recent_, found->second);
    if (found->second->exec == nullptr) return false;  // not capturable
    if (counts_ != nullptr) counts_->replayed.fetch_add(1, std::memory_order_relaxed);
  } else {
    if (!SeenEnough(key)) return false;
    cudaGraphExec_t exec = Capture(stream, enqueue);
    Keep(key, exec, tag != nullptr ? *tag : 0);
    found = by_key_.find(key);
    if (exec == nullptr) return false;
    if (counts_ != nullptr) counts_->captured.fetch_add(1, std::memory_order_relaxed);
  }
  if (tag != nullptr) *tag = found->second->tag;
  if (cudaGraphLaunch(found->second->exec, stream) != cudaSuccess) {
    // A launch that fails queues nothing; the plain way reports the error
    // of whatever is wrong.
    cudaGetLastError();
    return false;
  }
  return true;
}

bool GraphCache::SeenEnough(const std::string& key) {
  if (sightings_ <= 1) return true;
  if (seen_.size() >= size_t(4 * capacity_)) seen_.clear();
  int& count = seen_[key];
  if (++count < sightings_) return false;
  seen_.erase(key);
  return true;
}

void GraphCache::Keep(const std::string& key, cudaGraphExec_t exec, int tag) {
  // The slot waits for each request or batch before the next, so a graph
  // dropped here has no launch in flight.
  if (int(recent_.size()) >= capacity_) {
    by_key_.erase(recent_.back().key);
    if (recent_.back().exec != nullptr) cudaGraphExecDestroy(recent_.back().exec);
    recent_.pop_back();
  }
  recent_.push_front(Graph{key, exec, tag});
  by_key_[key] = recent_.begin();
}

cudaGraphExec_t GraphCache::Capture(cudaStream_t stream,
                                    const std::function<absl::Status()>& enqueue) {
  // Thread-local: the other slots' threads go on allocating and waiting
  // while this one captures; only this thread's calls are checked.
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  if (enqueued.ok() && ended == cudaSuccess) {
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // a failed capture is not sticky: clear it
  return exec;
}

}  // namespace gpucompute::server::cuda
