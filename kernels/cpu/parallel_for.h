// Splits [0, count) into contiguous ranges run on several threads: the
// caller's and those of one pool the process shares. Small ranges run
// inline so tiny requests pay nothing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/functional/function_ref.h"

namespace gpucompute::kernels::cpu {

// Logical cores, asked once: hardware_concurrency() reads /sys on every call,
// which would cost a tiny request more than its work.
int64_t HardwareThreads();

// Runs run(chunk) once for each chunk in [0, chunks), on this thread and on
// any of the pool's threads (one fewer than the cores, started at the first
// call) that are free; returns when every chunk has run. The caller takes
// chunks too, so a call finishes even while the pool serves other callers;
// concurrent callers share the pool instead of each starting threads (a
// thread started and joined per request cost about 40 us on a 2-core VM).
void RunChunks(int64_t chunks, absl::FunctionRef<void(int64_t chunk)> run);

template <typename Body>  // Body(int64_t begin, int64_t end)
void ParallelFor(int64_t count, int64_t work_per_item, Body body) {
  constexpr int64_t kMinWorkPerThread = 1 << 18;
  constexpr int64_t kChunksPerThread = 4;
  const int64_t by_work = std::max<int64_t>(1, count * work_per_item / kMinWorkPerThread);
  const int64_t threads = std::min({HardwareThreads(), count, by_work});
  if (threads <= 1) {
    body(0, count);
    return;
  }
  // Four chunks a thread: a thread that falls behind (preempted, or late
  // from another caller's work) leaves its last chunks to the others.
  const int64_t chunks = std::min(count, threads * kChunksPerThread);
  const int64_t chunk = (count + chunks - 1) / chunks;
  RunChunks((count + chunk - 1) / chunk,
            [&](int64_t c) { body(c * chunk, std::min(count, (c + 1) * chunk)); });
}

}  // namespace gpucompute::kernels::cpu
