#include "server/cuda/host_copy.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace gpucompute::server::cuda {

namespace {

// Copies bytes [begin, end) of the concatenated `src` pieces to dst + begin.
void CopyRange(char* dst, const std::vector<absl::Span<const char>>& src, size_t begin,
               size_t end) {
  size_t piece_start = 0;
  for (const auto& piece : src) {
    const size_t piece_end = piece_start + piece.size();
    const size_t lo = std::max(begin, piece_start), hi = std::min(end, piece_end);
    if (lo < hi) std::memcpy(dst + lo, piece.data() + (lo - piece_start), hi - lo);
    if (piece_end >= end) break;
    piece_start = piece_end;
  }
}

}  // namespace

void HostCopyPool::Copy(void* dst, const void* src, size_t bytes) {
  Gather(static_cast<char*>(dst), {absl::Span<const char>(static_cast<const char*>(src), bytes)});
}

void HostCopyPool::Gather(char* dst, const std::vector<absl::Span<const char>>& src) {
  size_t bytes = 0;
  for (const auto& piece : src) bytes += piece.size();
  // The destination is split evenly whatever the pieces' sizes, so small
  // pieces are copied in parallel too.
  constexpr size_t kMinPart = size_t{1} << 20;
  const size_t parts =
      std::min<size_t>(size_t(helpers_.threads()) + 1, std::max<size_t>(1, bytes / kMinPart));
  if (parts <= 1) {
    CopyRange(dst, src, 0, bytes);
    return;
  }
  const size_t part = (bytes / parts + 63) & ~size_t(63);
  absl::Mutex done_mu;
  size_t remaining = parts - 1;
  for (size_t i = 1; i < parts; ++i) {
    const size_t begin = std::min(bytes, i * part);
    const size_t end = i + 1 == parts ? bytes : std::min(bytes, begin + part);
    helpers_.Post([dst, &src, begin, end, &done_mu, &remaining] {
      CopyRange(dst, src, begin, end);
      absl::MutexLock done(&done_mu);
      --remaining;
    });
  }
  CopyRange(dst, src, 0, std::min(part, bytes));
  absl::MutexLock done(&done_mu);
  done_mu.Await(absl::Condition(
      +[](size_t* r) { return *r == 0; }, &remaining));
}

}  // namespace gpucompute::server::cuda
