#include "server/engine/host_buffers.h"

#include <utility>

namespace gpucompute::server {

std::unique_ptr<std::string> HostBufferPool::Acquire(size_t size) {
  if (size >= kMinPooledBytes) {
    absl::MutexLock lock(&mu_);
    // Smallest buffer at least this large; shrinking a string never writes.
    auto it = free_.lower_bound(size);
    if (it != free_.end()) {
      std::unique_ptr<std::string> buffer = std::move(it->second);
      retained_ -= int64_t(it->first);
      free_.erase(it);
      buffer->resize(size);
      return buffer;
    }
  }
  auto buffer = std::make_unique<std::string>();
  buffer->resize(size);
  return buffer;
}

void HostBufferPool::Release(std::unique_ptr<std::string> buffer) {
  if (!buffer || buffer->capacity() < kMinPooledBytes) return;
  // Grow to the full capacity once, so a later larger request that fits
  // writes no zeros.
  buffer->resize(buffer->capacity());
  const size_t size = buffer->size();
  absl::MutexLock lock(&mu_);
  if (retained_ + int64_t(size) > max_retained_bytes_) return;
  retained_ += int64_t(size);
  free_.emplace(size, std::move(buffer));
}

int64_t HostBufferPool::Trim() {
  std::multimap<size_t, std::unique_ptr<std::string>> freed;
  int64_t bytes = 0;
  {
    absl::MutexLock lock(&mu_);
    freed.swap(free_);
    bytes = std::exchange(retained_, 0);
  }
  return bytes;  // `freed` goes out of scope outside the lock
}

int64_t HostBufferPool::retained_bytes() const {
  absl::MutexLock lock(&mu_);
  return retained_;
}

}  // namespace gpucompute::server
