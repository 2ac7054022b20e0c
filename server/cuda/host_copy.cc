#include "server/cuda/host_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace gpucompute::server::cuda {

HostCopyPool::HostCopyPool(int threads) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

HostCopyPool::~HostCopyPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (auto& t : threads_) t.join();
}

void HostCopyPool::Loop() {
  for (;;) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](HostCopyPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->work_.empty();
          },
          this));
      if (work_.empty()) return;
      job = std::move(work_.front());
      work_.pop_front();
    }
    job();
  }
}

void HostCopyPool::Copy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kMinPart = size_t{1} << 20;
  const size_t parts = std::min<size_t>(threads_.size() + 1, std::max<size_t>(1, bytes / kMinPart));
  if (parts <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const size_t part = (bytes / parts + 63) & ~size_t(63);
  absl::Mutex done_mu;
  size_t remaining = parts - 1;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 1; i < parts; ++i) {
      const size_t begin = std::min(bytes, i * part);
      const size_t len = i + 1 == parts ? bytes - begin : std::min(part, bytes - begin);
      work_.push_back([=, &done_mu, &remaining] {
        std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, len);
        absl::MutexLock done(&done_mu);
        --remaining;
      });
    }
  }
  std::memcpy(dst, src, std::min(part, bytes));
  absl::MutexLock done(&done_mu);
  done_mu.Await(absl::Condition(
      +[](size_t* r) { return *r == 0; }, &remaining));
}

}  // namespace gpucompute::server::cuda
