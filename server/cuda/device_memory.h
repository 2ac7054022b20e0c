// A GPU's memory for requests, assembled from the pieces: the stream-ordered
// pool, statistics over it, and the byte budget over those. A request
// reserves its total, then takes its buffers through RequestMemory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cuda/budget_resource.h"
#include "server/cuda/pool_resource.h"
#include "server/cuda/statistics_resource.h"

namespace gpucompute::server::cuda {

// The bytes a buffer takes in a request's total: rounded up to 256, the
// alignment CUDA allocations have.
inline int64_t AlignedBytes(int64_t bytes) { return (bytes + 255) & ~int64_t{255}; }

// How long a request waits for its total to fit under the budget.
inline constexpr absl::Duration kMaxMemoryWait = absl::Seconds(30);

class DeviceMemory {
 public:
  // `cap_bytes`: most bytes reserved at once.
  static absl::StatusOr<std::unique_ptr<DeviceMemory>> Create(int ordinal, int64_t cap_bytes);

  // Blocks until `bytes` fit under the cap or `deadline` passes.
  absl::StatusOr<MemoryBudget::Reservation> Reserve(int64_t bytes, absl::Time deadline) {
    return budget_.Reserve(bytes, deadline);
  }

  int64_t limit_bytes() const { return budget_.limit_bytes(); }
  int64_t pool_reserved_bytes() const { return pool_->reserved_bytes(); }
  int64_t pool_used_bytes() const { return pool_->used_bytes(); }
  int64_t pool_growths() const { return statistics_.growths(); }

 private:
  DeviceMemory(std::unique_ptr<StreamOrderedPool> pool, int64_t cap_bytes)
      : pool_(std::move(pool)), statistics_(*pool_), budget_(statistics_, cap_bytes) {}

  std::unique_ptr<StreamOrderedPool> pool_;
  StatisticsResource statistics_;
  MemoryBudget budget_;
};

// One request's buffers, allocated on its stream within its reservation.
// On scope exit they are freed, the stream is waited for (so the memory is
// back in the pool), and only then does the reservation return its bytes.
class RequestMemory {
 public:
  RequestMemory(MemoryBudget::Reservation reservation, cudaStream_t stream)
      : reservation_(std::move(reservation)), stream_(stream) {}
  RequestMemory(const RequestMemory&) = delete;
  RequestMemory& operator=(const RequestMemory&) = delete;
  ~RequestMemory();

  absl::StatusOr<void*> Get(int64_t bytes);

 private:
  MemoryBudget::Reservation reservation_;
  cudaStream_t stream_;
  std::vector<std::pair<void*, size_t>> buffers_;
};

}  // namespace gpucompute::server::cuda
