// Streams with pinned staging of their own for tensor uploads and downloads,
// lent one per copy. Apart from the request slots so that a tensor's bytes
// never wait for a long kernel to free a slot, and a busy upload never holds
// up requests.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/staging.h"

namespace gpucompute::server::cuda {

class TransferLanes {
 public:
  struct Lane {
    UniqueStream stream;
    std::unique_ptr<StagingBuffers> staging;
  };

  class Lease {
   public:
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { lanes_.Release(lane_); }
    cudaStream_t stream() const { return lane_->stream.get(); }
    StagingBuffers& staging() const { return *lane_->staging; }

   private:
    friend class TransferLanes;
    Lease(TransferLanes& lanes, Lane* lane) : lanes_(lanes), lane_(lane) {}
    TransferLanes& lanes_;
    Lane* lane_;
  };

  // `count` lanes on the current device; counts cudaHostAlloc calls.
  static absl::StatusOr<std::unique_ptr<TransferLanes>> Create(
      int count, std::atomic<int64_t>& host_alloc_calls);

  // Waits for a free lane.
  Lease Acquire();

 private:
  explicit TransferLanes(std::vector<std::unique_ptr<Lane>> lanes);
  void Release(Lane* lane);

  std::vector<std::unique_ptr<Lane>> lanes_;
  absl::Mutex mu_;
  std::vector<Lane*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server::cuda
