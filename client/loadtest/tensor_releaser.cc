// The thread that releases the outputs a --placement=tensor row keeps.
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "loadtest/load.h"

namespace gpucompute::loadtest {

TensorReleaser::TensorReleaser(const Client* client) : client_(client) {
  thread_ = std::thread([this] { Loop(); });
}

TensorReleaser::~TensorReleaser() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TensorReleaser::Add(std::string id) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.push_back(std::move(id));
}

void TensorReleaser::ReleaseBatch(std::unique_lock<std::mutex>& lock) {
  if (queued_.empty()) return;
  std::vector<std::string> batch;
  batch.swap(queued_);
  lock.unlock();
  absl::StatusOr<v1::ReleaseTensorsResponse> r = client_->Release(batch);
  lock.lock();
  if (r.ok()) {
    released_ += r->released();
    failed_ += static_cast<int64_t>(batch.size()) - r->released();
  } else {
    failed_ += static_cast<int64_t>(batch.size());
  }
}

void TensorReleaser::ReleaseQueued(std::unique_lock<std::mutex>& lock) {
  while (!queued_.empty()) ReleaseBatch(lock);
}

void TensorReleaser::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  ReleaseQueued(lock);
}

void TensorReleaser::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // One call every 10 ms: kept outputs do not pile up against the tensor
    // budget, and the measured calls do not share the connection and the
    // server with a release each (draining until empty did just that: the
    // ids of the calls that finished during one release made the next).
    wake_.wait_for(lock, std::chrono::milliseconds(10));
    ReleaseBatch(lock);
  }
  ReleaseQueued(lock);
}

}  // namespace gpucompute::loadtest
