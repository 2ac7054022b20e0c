// Counters over an upstream resource: bytes handed out now and at most,
// allocations made, and growths (allocations after which the upstream's
// footprint passed its highest earlier value: it had to take more memory
// from below instead of reusing what it kept).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/cuda/memory_resource.h"

namespace gpucompute::server::cuda {

class StatisticsResource final : public MemoryResource {
 public:
  explicit StatisticsResource(MemoryResource& upstream) : upstream_(upstream) {}

  absl::StatusOr<void*> Allocate(size_t bytes, Stream stream) override;
  void Deallocate(void* ptr, size_t bytes, Stream stream) override;
  int64_t footprint_bytes() const override { return upstream_.footprint_bytes(); }

  int64_t used_bytes() const;
  int64_t peak_used_bytes() const;
  int64_t allocations() const;  // successful Allocate calls so far
  int64_t growths() const { return growths_.load(); }

 private:
  MemoryResource& upstream_;
  mutable absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_used_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> footprint_high_water_{0};
  std::atomic<int64_t> growths_{0};
};

}  // namespace gpucompute::server::cuda
