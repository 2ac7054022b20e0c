// memcpy split across a few persistent threads: one thread copies host
// memory at about 9 GB/s, below what pinned PCIe transfers sustain, so the
// staging copies of large matrices are spread over several cores.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "gpucompute/common/work_queue.h"

namespace gpucompute::server::cuda {

class HostCopyPool {
 public:
  explicit HostCopyPool(int threads) : helpers_(threads, "host-copy") {}

  // Copies `bytes` using the caller plus up to `threads` helpers.
  void Copy(void* dst, const void* src, size_t bytes);
  // Copies the pieces one after another to `dst`, the same way.
  void Gather(char* dst, const std::vector<absl::Span<const char>>& src);

 private:
  common::WorkQueue helpers_;  // on destruction, finishes queued parts first
};

}  // namespace gpucompute::server::cuda
