// Device memory of tensors, kept when a tensor is freed and handed to the
// next tensor of the same size. An op that keeps its output makes a tensor
// per call and the client releases it soon after; through the pool each
// costs a stream-ordered malloc and free, each followed by a stream wait
// under the driver's context lock, on one stream that every such call
// shares. A kept block skips all four CUDA calls: for a small op most of its
// server time, for a large one (a 4096^3 BF16 MatMul runs 190 us) still a
// tenth of it.
//
// A kept block holds its budget reservation, so the bytes it keeps stay
// charged to the device: the capacity bounds what requests cannot use.
// No CUDA header here: it is tested over a host-memory upstream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/cuda/budget_resource.h"

namespace gpucompute::server::cuda {

class TensorBlocks {
 public:
  // A tensor's memory: `allocated` bytes at `data` within `reservation`,
  // which reserved the allocation's aligned size.
  struct Block {
    MemoryBudget::Reservation reservation;
    void* data = nullptr;
    size_t allocated = 0;
  };

  // Keeps at most `capacity_bytes` (aligned sizes); 0 keeps nothing. Small
  // blocks (up to `capacity_bytes / kBlocksPerCapacity`) may fill it; large
  // ones (up to half of it) only half of it, so that a few large tensors
  // cannot crowd out the many small ones. Blocks still kept at destruction
  // are freed on `stream`.
  TensorBlocks(int64_t capacity_bytes, Stream stream);
  TensorBlocks(const TensorBlocks&) = delete;
  TensorBlocks& operator=(const TensorBlocks&) = delete;
  ~TensorBlocks();

  // A kept block of `aligned_bytes`, or nothing.
  std::optional<Block> Take(int64_t aligned_bytes);
  // Keeps `block` of `aligned_bytes` when it fits; otherwise hands it back
  // for the caller to free. A block whose allocation is smaller than its
  // size class is handed back too: any tensor of the class must fit in it.
  // The memory must be idle: no queued GPU work may still use it.
  std::optional<Block> Keep(Block block, int64_t aligned_bytes);

  int64_t kept_bytes() const;
  int64_t capacity_bytes() const { return capacity_bytes_; }
  int64_t max_small_block_bytes() const { return capacity_bytes_ / kBlocksPerCapacity; }
  int64_t max_block_bytes() const { return capacity_bytes_ / 2; }

  // The largest small block is this fraction of the capacity.
  static constexpr int64_t kBlocksPerCapacity = 64;

 private:
  const int64_t capacity_bytes_;
  const Stream stream_;
  mutable absl::Mutex mu_;
  int64_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kept_large_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::vector<Block>> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server::cuda
