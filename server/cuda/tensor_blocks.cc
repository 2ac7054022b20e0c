#include "server/cuda/tensor_blocks.h"

#include <utility>

namespace gpucompute::server::cuda {

TensorBlocks::TensorBlocks(int64_t capacity_bytes, Stream stream)
    : capacity_bytes_(capacity_bytes > 0 ? capacity_bytes : 0), stream_(stream) {}

TensorBlocks::~TensorBlocks() {
  absl::MutexLock lock(&mu_);
  for (auto& [size, blocks] : kept_) {
    for (Block& b : blocks) b.reservation.Deallocate(b.data, b.allocated, stream_);
  }
  kept_.clear();
}

std::optional<TensorBlocks::Block> TensorBlocks::Take(int64_t aligned_bytes) {
  if (aligned_bytes > max_block_bytes()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = kept_.find(aligned_bytes);
  if (it == kept_.end() || it->second.empty()) return std::nullopt;
  Block block = std::move(it->second.back());
  it->second.pop_back();
  kept_bytes_ -= aligned_bytes;
  if (aligned_bytes > max_small_block_bytes()) kept_large_bytes_ -= aligned_bytes;
  return block;
}

std::optional<TensorBlocks::Block> TensorBlocks::Keep(Block block, int64_t aligned_bytes) {
  if (aligned_bytes > max_block_bytes() || block.allocated < size_t(aligned_bytes)) return block;
  const bool large = aligned_bytes > max_small_block_bytes();
  absl::MutexLock lock(&mu_);
  if (kept_bytes_ + aligned_bytes > capacity_bytes_) return block;
  if (large && kept_large_bytes_ + aligned_bytes > max_block_bytes()) return block;
  kept_bytes_ += aligned_bytes;
  if (large) kept_large_bytes_ += aligned_bytes;
  kept_[aligned_bytes].push_back(std::move(block));
  return std::nullopt;
}

int64_t TensorBlocks::kept_bytes() const {
  absl::MutexLock lock(&mu_);
  return kept_bytes_;
}

}  // namespace gpucompute::server::cuda
