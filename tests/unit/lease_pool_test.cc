#include "server/engine/lease_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace gpucompute::server {
namespace {

struct Item {
  int id = 0;
  std::atomic<int> holders{0};
};

LeasePool<Item> PoolOf(int n) {
  std::vector<std::unique_ptr<Item>> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(std::make_unique<Item>());
    items.back()->id = i;
  }
  return LeasePool<Item>(std::move(items));
}

// A lease held apart from the scope that took it (a lease does not move).
std::unique_ptr<LeasePool<Item>::Lease> Take(LeasePool<Item>& pool) {
  return std::unique_ptr<LeasePool<Item>::Lease>(new LeasePool<Item>::Lease(pool.Acquire()));
}

TEST(LeasePool, LendsEachItemOnceUntilItsLeaseEnds) {
  LeasePool<Item> pool = PoolOf(3);
  std::set<int> lent;
  std::vector<std::unique_ptr<LeasePool<Item>::Lease>> leases;
  for (int i = 0; i < 3; ++i) {
    leases.push_back(Take(pool));
    lent.insert((*leases.back())->id);
  }
  EXPECT_EQ(lent, (std::set<int>{0, 1, 2}));
  const int returned = (*leases[1])->id;
  leases[1].reset();
  EXPECT_EQ(pool.Acquire()->id, returned);  // the only one free
}

TEST(LeasePool, AThreadGetsBackTheItemItHadLast) {
  LeasePool<Item> pool = PoolOf(4);
  int mine = -1;
  {
    auto lease = pool.Acquire();
    mine = lease->id;
  }
  for (int i = 0; i < 10; ++i) EXPECT_EQ(pool.Acquire()->id, mine);
}

TEST(LeasePool, AcquireWaitsForAReleaseWhenAllAreLent) {
  LeasePool<Item> pool = PoolOf(2);
  auto a = Take(pool);
  auto b = Take(pool);
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    auto lease = pool.Acquire();
    got = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  b.reset();
  waiter.join();
  EXPECT_TRUE(got.load());
}

// More threads than items, each lease checked to be its item's only holder.
TEST(LeasePool, ManyThreadsNeverShareAnItemAndNoneWaitsForever) {
  LeasePool<Item> pool = PoolOf(3);
  constexpr int kThreads = 12, kLeases = 3000;
  std::atomic<int> shared{0}, total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kLeases; ++i) {
        auto lease = pool.Acquire();
        if (lease->holders.fetch_add(1) != 0) shared.fetch_add(1);
        if (i % 64 == 0) std::this_thread::yield();
        lease->holders.fetch_sub(1);
        total.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.load(), 0);
  EXPECT_EQ(total.load(), kThreads * kLeases);
}

}  // namespace
}  // namespace gpucompute::server
