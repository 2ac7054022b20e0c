// Reusable host buffers for large payloads (results, inputs read from a
// shared-memory region's file, and Download's chunks). A fresh 64 MiB std::string costs a page
// fault per 4 KiB page plus a zero fill before it is written: tens of milliseconds, more than the
// copies themselves. Buffers handed back keep their pages, so steady serving of similar shapes
// touches no new memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"

namespace gpucompute::server {

class HostBufferPool {
 public:
  // Buffers below this size are not worth pooling.
  static constexpr size_t kMinPooledBytes = size_t{1} << 20;

  explicit HostBufferPool(int64_t max_retained_bytes) : max_retained_bytes_(max_retained_bytes) {}

  // A string of exactly `size` bytes with unspecified contents.
  std::unique_ptr<std::string> Acquire(size_t size);
  // Keeps `buffer` for reuse unless that would retain more than the limit.
  void Release(std::unique_ptr<std::string> buffer);

  // Frees every retained buffer (the server went idle); returns the bytes.
  int64_t Trim();

  int64_t retained_bytes() const;

 private:
  const int64_t max_retained_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, std::unique_ptr<std::string>> free_ ABSL_GUARDED_BY(mu_);  // by size
  int64_t retained_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpucompute::server
