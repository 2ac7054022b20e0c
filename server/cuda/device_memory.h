// Device memory for requests: a stream-ordered pool (cudaMallocAsync on a
// cudaMemPool_t that keeps freed memory) behind a byte budget. A request
// reserves its bytes first and waits while others hold the budget; one that
// can never fit, or does not fit before its wait ends, gets
// RESOURCE_EXHAUSTED.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpucompute::server::cuda {

class DeviceMemory {
 public:
  // `cap_bytes`: most bytes handed out at once.
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Create(int ordinal, int64_t cap_bytes);
  ~DeviceMemory();

  // Blocks until `bytes` fit under the cap or `wait_until` passes.
  absl::Status Reserve(int64_t bytes, absl::Time wait_until);
  void Unreserve(int64_t bytes);

  // Stream-ordered allocation from the pool (within a reservation).
  absl::StatusOr<void*> Allocate(size_t bytes, cudaStream_t stream);
  void Free(void* ptr, cudaStream_t stream);

  int64_t cap_bytes() const { return cap_bytes_; }
  int64_t reserved_bytes() const;  // held by the pool
  int64_t used_bytes() const;      // handed out now
  int64_t growths() const { return growths_.load(); }

 private:
  DeviceMemory(cudaMemPool_t pool, int64_t cap_bytes) : pool_(pool), cap_bytes_(cap_bytes) {}

  cudaMemPool_t pool_;
  const int64_t cap_bytes_;
  absl::Mutex mu_;
  int64_t budget_used_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> high_water_{0};
  std::atomic<int64_t> growths_{0};
};

}  // namespace gpucompute::server::cuda
