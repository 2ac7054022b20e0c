// The spinners run while calls are in flight or new ones come, rest after
// the linger, and stop with their owner.
#include "server/ops/awake_cores.h"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace gpucompute::server {
namespace {

// Polls `done` for up to 5 s (a loaded 2-core machine included).
template <typename Done>
bool Eventually(Done done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(AwakeCores, SpinWhileCallsAreInFlightAndRestAfterTheLinger) {
  std::atomic<int64_t> started{0}, in_flight{0};
  AwakeCores awake(absl::Milliseconds(20), [&] {
    return AwakeCores::Activity{started.load(), in_flight.load()};
  });
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  EXPECT_EQ(awake.cores(), CPU_COUNT(&allowed));
  EXPECT_FALSE(awake.awake());

  started = 1;
  in_flight = 1;
  EXPECT_TRUE(Eventually([&] { return awake.awake(); }));
  // Still in flight well past the linger: still awake.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_TRUE(awake.awake());

  in_flight = 0;
  EXPECT_TRUE(Eventually([&] { return !awake.awake(); }));
}

// A call that began and ended between two polls wakes them too. The linger
// is long here: a test thread that a loaded machine kept off its core for
// longer than the linger would otherwise never see them awake.
TEST(AwakeCores, ACallBetweenTwoPollsWakesThem) {
  std::atomic<int64_t> started{0}, polls{0};
  AwakeCores awake(absl::Seconds(30), [&] {
    ++polls;
    return AwakeCores::Activity{started.load(), 0};
  });
  // The watcher has seen the count before the call, and compared once.
  ASSERT_TRUE(Eventually([&] { return polls.load() >= 2; }));
  EXPECT_FALSE(awake.awake());
  started = 1;
  EXPECT_TRUE(Eventually([&] { return awake.awake(); }));
}

TEST(AwakeCores, RestWhileMoreCallsThanAQuarterOfTheCoresAreInFlight) {
  std::atomic<int64_t> in_flight{1};
  AwakeCores awake(absl::Seconds(10), [&] { return AwakeCores::Activity{0, in_flight.load()}; });
  EXPECT_TRUE(Eventually([&] { return awake.awake(); }));
  in_flight = awake.busy_calls() + 1;
  EXPECT_TRUE(Eventually([&] { return !awake.awake(); }));
  in_flight = awake.busy_calls();
  EXPECT_TRUE(Eventually([&] { return awake.awake(); }));
}

TEST(AwakeCores, StopsWhileSpinning) {
  std::atomic<int64_t> in_flight{1};
  auto awake = std::make_unique<AwakeCores>(absl::Seconds(10), [&] {
    return AwakeCores::Activity{0, in_flight.load()};
  });
  EXPECT_TRUE(Eventually([&] { return awake->awake(); }));
  awake.reset();  // joins every spinner
}

}  // namespace
}  // namespace gpucompute::server
