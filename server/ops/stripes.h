// Per-thread stripes for the metrics every request updates: each thread
// adds into its own cache line, and a scrape adds the stripes up, so that
// threads serving calls at once never contend on one line.
#pragma once

#include <atomic>

namespace gpucompute::server {

// Stripes per metric series: the threads that serve calls on a 16-core
// host, with room to spare.
inline constexpr int kMetricStripes = 16;

// This thread's stripe: threads take stripes in turn as they first record.
inline int StripeOfThisThread() {
  static std::atomic<int> next{0};
  thread_local const int mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % kMetricStripes;
}

}  // namespace gpucompute::server
