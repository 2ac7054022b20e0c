#include "server/cuda/transfer_lanes.h"

#include <utility>

namespace gpucompute::server::cuda {

absl::StatusOr<std::unique_ptr<TransferLanes>> TransferLanes::Create(
    int count, std::atomic<int64_t>& host_alloc_calls) {
  std::vector<std::unique_ptr<Lane>> lanes;
  for (int i = 0; i < count; ++i) {
    auto stream = CreateStream();
    if (!stream.ok()) return stream.status();
    auto staging = StagingBuffers::Create(host_alloc_calls);
    if (!staging.ok()) return staging.status();
    lanes.push_back(std::make_unique<Lane>(Lane{std::move(*stream), std::move(*staging)}));
  }
  return std::unique_ptr<TransferLanes>(new TransferLanes(std::move(lanes)));
}

TransferLanes::TransferLanes(std::vector<std::unique_ptr<Lane>> lanes) : lanes_(std::move(lanes)) {
  for (auto& lane : lanes_) free_.push_back(lane.get());
}

TransferLanes::Lease TransferLanes::Acquire() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](std::vector<Lane*>* free) { return !free->empty(); }, &free_));
  Lane* lane = free_.back();
  free_.pop_back();
  return Lease(*this, lane);
}

void TransferLanes::Release(Lane* lane) {
  absl::MutexLock lock(&mu_);
  free_.push_back(lane);
}

}  // namespace gpucompute::server::cuda
