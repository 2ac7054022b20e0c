#include "server/cuda/statistics_resource.h"

#include <algorithm>

namespace gpucompute::server::cuda {

absl::StatusOr<void*> StatisticsResource::Allocate(size_t bytes, Stream stream) {
  auto ptr = upstream_.Allocate(bytes, stream);
  if (!ptr.ok()) return ptr;
  {
    absl::MutexLock lock(&mu_);
    used_ += int64_t(bytes);
    peak_used_ = std::max(peak_used_, used_);
    ++allocations_;
  }
  // Concurrent allocations may see the same new footprint: one counts it.
  const int64_t footprint = upstream_.footprint_bytes();
  int64_t seen = footprint_high_water_.load();
  while (footprint > seen) {
    if (footprint_high_water_.compare_exchange_weak(seen, footprint)) {
      growths_.fetch_add(1);
      break;
    }
  }
  return ptr;
}

void StatisticsResource::Deallocate(void* ptr, size_t bytes, Stream stream) {
  upstream_.Deallocate(ptr, bytes, stream);
  absl::MutexLock lock(&mu_);
  used_ -= int64_t(bytes);
}

int64_t StatisticsResource::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

int64_t StatisticsResource::peak_used_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_used_;
}

int64_t StatisticsResource::allocations() const {
  absl::MutexLock lock(&mu_);
  return allocations_;
}

}  // namespace gpucompute::server::cuda
