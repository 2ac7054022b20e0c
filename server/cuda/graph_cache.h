// Stream work captured once into a CUDA graph and replayed with one launch.
// A small batch of n requests then costs the host one graph launch instead
// of n kernel launches (several for cuBLAS), and a lone small request one
// launch instead of its copies, kernel launches and event records: each of
// those is a driver call under the context's lock that the slots' threads
// share. Replay runs the very copies and kernels, with the very arguments,
// that would have been queued one by one, so every result is bit for bit
// the same. One cache per slot and kind of work: a graph's pointers are the
// slot's scratch and staging (and, for a request, the tensors it names).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace gpucompute::server::cuda {

// What a device's caches of one kind did, summed over its slots: graphs
// captured (each then launched once) and launches of a graph kept from
// before. Read by the metrics while the slots launch.
struct GraphCounts {
  std::atomic<int64_t> captured{0};
  std::atomic<int64_t> replayed{0};
};

class GraphCache {
 public:
  // Holds at most `capacity` graphs, dropping the least recently launched;
  // 0 turns replay off. A key is captured the `sightings`-th time it is
  // launched (1: at once): work whose pointers change from call to call
  // (a fresh tensor each time) is then never captured, at a hash lookup.
  // Captures and replays are added to `counts` when given.
  explicit GraphCache(int capacity, int sightings = 1, GraphCounts* counts = nullptr)
      : capacity_(capacity), sightings_(sightings), counts_(counts) {}
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Queues on `stream` the graph of what `enqueue` puts there, and returns
  // true; or queues nothing and returns false, and the caller queues the
  // work the plain way: replay is off, the key is not yet seen often enough,
  // or its work could not be captured (an error of `enqueue` or of the
  // capture; such a key is not tried again). The key names everything the
  // work depends on (variant, shape, sizes, and any pointer that is not the
  // slot's own at a fixed offset). `tag`, when given, is the caller's word
  // on the captured work: what `enqueue` left in it while capturing is kept
  // with the graph and written back to it on each replay.
  bool Launch(const std::string& key, cudaStream_t stream,
              const std::function<absl::Status()>& enqueue, int* tag = nullptr);

  bool enabled() const { return capacity_ > 0; }

 private:
  struct Graph {
    std::string key;
    cudaGraphExec_t exec;  // null: not capturable
    int tag;
  };
  using Recent = std::list<Graph>;
  // The graph of `enqueue`'s work, or null when it cannot be captured.
  static cudaGraphExec_t Capture(cudaStream_t stream, const std::function<absl::Status()>& enqueue);
  // Whether `key` has now been seen `sightings_` times (counting this one).
  bool SeenEnough(const std::string& key);
  // Keeps `exec` (null: not capturable) as the most recent, dropping the
  // least recently launched beyond capacity.
  void Keep(const std::string& key, cudaGraphExec_t exec, int tag);

  const int capacity_;
  const int sightings_;
  GraphCounts* const counts_;
  Recent recent_;  // most recently launched first
  absl::flat_hash_map<std::string, Recent::iterator> by_key_;
  // Keys seen fewer than `sightings_` times, with their count; forgotten
  // all at once when it outgrows the cache, so it stays bounded.
  absl::flat_hash_map<std::string, int> seen_;
};

}  // namespace gpucompute::server::cuda
