// Splits [0, count) into contiguous ranges run on several threads; small
// ranges run inline so tiny requests pay no thread start-up.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace gpucompute::kernels::cpu {

// Logical cores, asked once: hardware_concurrency() reads /sys on every call,
// which would cost a tiny request more than its work.
inline int64_t HardwareThreads() {
  static const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

template <typename Body>  // Body(int64_t begin, int64_t end)
void ParallelFor(int64_t count, int64_t work_per_item, Body body) {
  constexpr int64_t kMinWorkPerThread = 1 << 18;
  const int64_t hw = HardwareThreads();
  const int64_t by_work = std::max<int64_t>(1, count * work_per_item / kMinWorkPerThread);
  const int64_t threads = std::min({hw, count, by_work});
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t chunk = (count + threads - 1) / threads;
  for (int64_t begin = chunk; begin < count; begin += chunk) {
    pool.emplace_back(body, begin, std::min(count, begin + chunk));
  }
  body(0, std::min(count, chunk));
  for (std::thread& t : pool) t.join();
}

}  // namespace gpucompute::kernels::cpu
