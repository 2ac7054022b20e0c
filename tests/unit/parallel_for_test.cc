// ParallelFor and the pool behind it: every item once, in contiguous
// ranges, for one caller and for many at once.
#include "cpu/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace gpucompute::kernels::cpu {
namespace {

// Work enough per item that any count of 2 or more splits over the cores.
constexpr int64_t kHeavyItem = int64_t{1} << 18;

// How many times ParallelFor handed each of `count` items to its body.
std::vector<int> Hits(int64_t count) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
  ParallelFor(count, kHeavyItem, [&](int64_t begin, int64_t end) {
    EXPECT_LE(0, begin);
    EXPECT_TRUE(begin < end || count == 0) << begin << " " << end;  // no item: one empty range
    EXPECT_LE(end, count);
    for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (const auto& h : hits) out.push_back(h.load());
  return out;
}

TEST(ParallelFor, EveryItemOnceForCountsAroundTheCores) {
  const int64_t cores = HardwareThreads();
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{3}, cores - 1, cores, cores + 1,
                        2 * cores + 3, int64_t{1000}, int64_t{4097}}) {
    if (count < 0) continue;
    SCOPED_TRACE(count);
    EXPECT_EQ(Hits(count), std::vector<int>(size_t(count), 1));
  }
}

TEST(ParallelFor, LightWorkRunsOnTheCallersThreadInOneRange) {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  ParallelFor(1000, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 1000);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelFor, ChunksRunOnceEachAndTheCallReturnsAfterTheLast) {
  for (int64_t chunks : {0, 1, 2, 5, 64}) {
    std::vector<std::atomic<int>> ran(static_cast<size_t>(chunks));
    RunChunks(chunks, [&](int64_t c) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // the others start meanwhile
      ran[size_t(c)].fetch_add(1);
    });
    for (int64_t c = 0; c < chunks; ++c) EXPECT_EQ(ran[size_t(c)].load(), 1) << chunks << " " << c;
  }
}

// Callers at once, more than the cores: each gets its own items back, all of
// them, while they share the pool.
TEST(ParallelFor, ConcurrentCallersShareThePool) {
  constexpr int kCallers = 12, kCalls = 40;
  constexpr int64_t kCount = 257;
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kCallers; ++t) {
    callers.emplace_back([&, t] {
      for (int call = 0; call < kCalls; ++call) {
        std::vector<int64_t> out(size_t(kCount), -1);
        ParallelFor(kCount, kHeavyItem, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[size_t(i)] = i * kCallers + t;
        });
        for (int64_t i = 0; i < kCount; ++i) wrong += out[size_t(i)] != i * kCallers + t;
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace gpucompute::kernels::cpu
