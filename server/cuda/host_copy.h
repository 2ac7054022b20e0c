// memcpy split across a few persistent threads: one thread copies host
// memory at about 9 GB/s, below what pinned PCIe transfers sustain, so the
// staging copies of large matrices are spread over several cores.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace gpucompute::server::cuda {

class HostCopyPool {
 public:
  explicit HostCopyPool(int threads);
  ~HostCopyPool();

  // Copies `bytes` using the caller plus up to `threads` helpers.
  void Copy(void* dst, const void* src, size_t bytes);
  // Copies the pieces one after another to `dst`, the same way.
  void Gather(char* dst, const std::vector<absl::Span<const char>>& src);

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gpucompute::server::cuda
