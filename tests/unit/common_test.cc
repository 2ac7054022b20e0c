// The common library: the statistics timings are summarised by, the
// steady-clock durations, the work queue's order and shutdown drain, and
// thread names.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/common/thread_name.h"
#include "gpucompute/common/time.h"
#include "gpucompute/common/work_queue.h"
#include "gtest/gtest.h"

namespace gpucompute::common {
namespace {

TEST(Median, OfNoneIsZero) { EXPECT_EQ(Median(std::vector<double>{}), 0); }

TEST(Median, OfOneIsIt) { EXPECT_EQ(Median(std::vector<double>{7.5}), 7.5); }

TEST(Median, OfAnOddCountIsTheMiddle) { EXPECT_EQ(Median(std::vector<int>{9, 1, 5, 3, 7}), 5); }

TEST(Median, OfAnEvenCountIsTheMeanOfTheTwoMiddles) {
  // Not the upper middle (4) nor the lower (3).
  EXPECT_EQ(Median(std::vector<int64_t>{4, 1, 3, 10}), 3.5);
  EXPECT_EQ(Median(std::vector<double>{2, 1}), 1.5);
}

TEST(Percentile, NearestRank) {
  const std::vector<int> sorted = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  EXPECT_EQ(PercentileOfSorted(sorted, 50), 50);
  EXPECT_EQ(PercentileOfSorted(sorted, 90), 90);
  EXPECT_EQ(PercentileOfSorted(sorted, 91), 100);
  EXPECT_EQ(PercentileOfSorted(sorted, 95), 100);
}

TEST(Percentile, EdgesAreTheSmallestAndTheLargest) {
  const std::vector<int> sorted = {1, 2, 3, 4};
  EXPECT_EQ(PercentileOfSorted(sorted, 0), 1);
  EXPECT_EQ(PercentileOfSorted(sorted, -5), 1);
  EXPECT_EQ(PercentileOfSorted(sorted, 100), 4);
  EXPECT_EQ(PercentileOfSorted(sorted, 250), 4);
  EXPECT_EQ(PercentileOfSorted(std::vector<int>{42}, 0), 42);
  EXPECT_EQ(PercentileOfSorted(std::vector<int>{42}, 100), 42);
  EXPECT_EQ(PercentileOfSorted(std::vector<int>{}, 50), 0);
}

TEST(Percentile, UnsortedInputGivesWhatSortedDoes) {
  const std::vector<int64_t> values = {70, 10, 100, 40, 20, 90, 30, 60, 80, 50};
  std::vector<int64_t> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  for (double p : {0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 100.0}) {
    EXPECT_EQ(Percentile(values, p), PercentileOfSorted(sorted, p)) << "p" << p;
  }
  EXPECT_EQ(Percentile(std::vector<double>{}, 50), 0);
}

TEST(MicrosSince, CountsSteadyClockMicroseconds) {
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const double us = MicrosSince(start);
  EXPECT_GE(us, 2000);
  EXPECT_LT(us, 10'000'000);
}

TEST(WorkQueue, RunsEverythingPostedFromSeveralThreads) {
  constexpr int kPosters = 4, kEach = 1000;
  std::atomic<int> ran{0};
  absl::Mutex mu;
  int seen = 0;
  absl::Notification all_ran;
  {
    WorkQueue queue(3, "test");
    EXPECT_EQ(queue.threads(), 3);
    std::vector<std::thread> posters;
    for (int p = 0; p < kPosters; ++p) {
      posters.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) {
          queue.Post([&] {
            ran.fetch_add(1);
            absl::MutexLock lock(&mu);
            if (++seen == kPosters * kEach) all_ran.Notify();
          });
        }
      });
    }
    for (auto& t : posters) t.join();
    // Runs while the queue is alive, not only in its destructor.
    all_ran.WaitForNotification();
  }
  EXPECT_EQ(ran.load(), kPosters * kEach);
}

TEST(WorkQueue, ShutdownRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  absl::Notification release;
  {
    WorkQueue queue(1, "test");
    // The one worker is held, so the rest is still queued at shutdown.
    queue.Post([&] { release.WaitForNotification(); });
    for (int i = 0; i < 100; ++i) queue.Post([&] { ran.fetch_add(1); });
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(WorkQueue, WorkPostedDuringShutdownRuns) {
  std::atomic<int> ran{0};
  {
    WorkQueue queue(2, "test");
    queue.Post([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      queue.Post([&] { ran.fetch_add(1); });
    });
  }
  EXPECT_EQ(ran.load(), 1);
}

TEST(WorkQueue, OneWorkerRunsInOrderPosted) {
  std::vector<int> order;
  {
    WorkQueue queue(1, "test");
    for (int i = 0; i < 50; ++i) queue.Post([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[size_t(i)], i);
}

TEST(WorkQueue, NoThreadsStartsNone) {
  WorkQueue queue(0, "test");
  EXPECT_EQ(queue.threads(), 0);
}

TEST(WorkQueue, EachWorkerCarriesTheQueuesNameAndItsNumber) {
#if !defined(__linux__)
  GTEST_SKIP() << "threads are named on Linux only";
#endif
  absl::Mutex mu;
  std::set<std::string> names;
  std::atomic<int> started{0};  // outlives the queue, whose destructor runs what is queued
  {
    WorkQueue queue(2, "copy");
    // Each task holds its worker until both workers have one: both names seen.
    for (int i = 0; i < 2; ++i) {
      queue.Post([&] {
        started.fetch_add(1);
        while (started.load() < 2) std::this_thread::yield();
        absl::MutexLock lock(&mu);
        names.insert(ThisThreadName());
      });
    }
  }
  EXPECT_EQ(names, (std::set<std::string>{"copy0", "copy1"}));
}

TEST(ThreadName, IsCutToTheFifteenBytesTheKernelKeeps) {
#if !defined(__linux__)
  GTEST_SKIP() << "threads are named on Linux only";
#endif
  std::string seen;
  std::thread([&seen] {
    NameThisThread("a-name-longer-than-fifteen-bytes");
    seen = ThisThreadName();
  }).join();
  EXPECT_EQ(seen, "a-name-longer-t");
}

}  // namespace
}  // namespace gpucompute::common
