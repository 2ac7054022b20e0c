// The kernel launches of a small batch, captured once into a CUDA graph and
// replayed with one launch: a batch of n requests then costs the host one
// graph launch instead of n kernel launches (several for cuBLAS), each a
// driver call under the context's lock that the slots' threads share.
// Replay runs the very kernels, with the very arguments, that the batch
// would have launched one by one, so every result is bit for bit the same.
// One cache per slot: a graph's pointers are the slot's scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace gpucompute::server::cuda {

class BatchGraphCache {
 public:
  // Holds at most `capacity` graphs, dropping the least recently launched;
  // 0 turns replay off (Launch then only enqueues).
  explicit BatchGraphCache(int capacity) : capacity_(capacity) {}
  ~BatchGraphCache();
  BatchGraphCache(const BatchGraphCache&) = delete;
  BatchGraphCache& operator=(const BatchGraphCache&) = delete;

  // Runs on `stream` the launches `enqueue` makes there: the graph for `key`
  // when it is known, else `enqueue` captured into a new one and replayed.
  // The key names everything the launches depend on (variant, shape, batch
  // size: the buffers are the slot's, at fixed offsets). An error of
  // `enqueue` or of the capture leaves nothing queued and no graph kept;
  // the caller may launch the batch the plain way instead.
  absl::Status Launch(const std::string& key, cudaStream_t stream,
                      const std::function<absl::Status()>& enqueue);

  int64_t captured() const { return captured_; }
  int64_t replayed() const { return replayed_; }

 private:
  using Recent = std::list<std::pair<std::string, cudaGraphExec_t>>;
  absl::Status Capture(const std::string& key, cudaStream_t stream,
                       const std::function<absl::Status()>& enqueue);
  // Keeps `exec` (null: not capturable) as the most recent, dropping the
  // least recently launched beyond capacity.
  void Keep(const std::string& key, cudaGraphExec_t exec);

  const int capacity_;
  Recent recent_;  // most recently launched first
  absl::flat_hash_map<std::string, Recent::iterator> by_key_;
  int64_t captured_ = 0;
  int64_t replayed_ = 0;
};

}  // namespace gpucompute::server::cuda
