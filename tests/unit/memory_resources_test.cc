// The device memory adaptors that need no GPU, over a host-memory upstream
// that keeps what it has taken the way the CUDA pool does: the budget's
// waits, deadlines and limits, reservations that refuse to overdraw, and the
// statistics' counters and growths; the kept blocks of small tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/cuda/budget_resource.h"
#include "server/cuda/statistics_resource.h"
#include "server/cuda/tensor_blocks.h"
#include "support/test_util.h"

namespace gpucompute::server::cuda {
namespace {

// Host memory; its footprint is the most it has had in use, rounded up to
// whole blocks (a pool that keeps freed memory).
class HostUpstream final : public MemoryResource {
 public:
  static constexpr int64_t kBlock = int64_t{1} << 20;

  absl::StatusOr<void*> Allocate(size_t bytes, Stream) override {
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (fail_) return absl::ResourceExhaustedError("host upstream refuses");
    in_use_ += int64_t(bytes);
    max_in_use_ = std::max(max_in_use_, in_use_);
    footprint_ = std::max(footprint_, (in_use_ + kBlock - 1) / kBlock * kBlock);
    return std::malloc(std::max<size_t>(bytes, 1));
  }
  void Deallocate(void* ptr, size_t bytes, Stream) override {
    std::free(ptr);
    absl::MutexLock lock(&mu_);
    in_use_ -= int64_t(bytes);
  }
  int64_t footprint_bytes() const override {
    absl::MutexLock lock(&mu_);
    return footprint_;
  }

  void set_fail(bool fail) {
    absl::MutexLock lock(&mu_);
    fail_ = fail;
  }
  int64_t calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int64_t in_use() const {
    absl::MutexLock lock(&mu_);
    return in_use_;
  }
  int64_t max_in_use() const {
    absl::MutexLock lock(&mu_);
    return max_in_use_;
  }

 private:
  mutable absl::Mutex mu_;
  bool fail_ = false;
  int64_t calls_ = 0, in_use_ = 0, max_in_use_ = 0, footprint_ = 0;
};

constexpr Stream kNoStream = nullptr;

bool Contains(const absl::Status& s, const std::string& text) {
  return s.message().find(text) != absl::string_view::npos;
}

TEST(MemoryBudget, ReservationHoldsItsBytesUntilItEnds) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  {
    auto r = budget.Reserve(600, absl::InfiniteFuture());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reserved_bytes(), 600);
    EXPECT_EQ(budget.held_bytes(), 600);
    auto r2 = budget.Reserve(400, absl::InfiniteFuture());
    ASSERT_TRUE(r2.ok()) << r2.status();
    EXPECT_EQ(budget.held_bytes(), 1000);
  }
  EXPECT_EQ(budget.held_bytes(), 0);
  EXPECT_EQ(host.calls(), 0) << "reserving allocates nothing";
}

TEST(MemoryBudget, MoreThanTheLimitIsRefusedAtOnce) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  const absl::Time start = absl::Now();
  auto r = budget.Reserve(1001, absl::InfiniteFuture());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(r.status(), "1001") && Contains(r.status(), "1000")) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "it must not wait for what can never fit";
  EXPECT_EQ(budget.held_bytes(), 0);
}

TEST(MemoryBudget, WaitsUntilAnotherReservationEnds) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  std::optional<MemoryBudget::Reservation> held;
  held.emplace(*budget.Reserve(800, absl::InfiniteFuture()));
  std::atomic<bool> released{false};
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = true;
    held.reset();
  });
  auto r = budget.Reserve(500, absl::Now() + absl::Seconds(30));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(released.load()) << "500 more bytes fit only after the 800 were given back";
  EXPECT_EQ(budget.held_bytes(), 500);
  other.join();
}

TEST(MemoryBudget, DeadlineEndsTheWaitWithHeldAskedAndLimitInTheMessage) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  auto held = budget.Reserve(800, absl::InfiniteFuture());
  ASSERT_TRUE(held.ok());
  auto r = budget.Reserve(500, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(r.status(), "500") && Contains(r.status(), "800") &&
              Contains(r.status(), "1000"))
      << r.status();
  EXPECT_EQ(budget.held_bytes(), 800);
}

TEST(MemoryBudget, MovedReservationGivesItsBytesBackOnce) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  {
    auto r = budget.Reserve(300, absl::InfiniteFuture());
    ASSERT_TRUE(r.ok());
    MemoryBudget::Reservation moved(std::move(*r));
    EXPECT_EQ(moved.reserved_bytes(), 300);
    EXPECT_EQ(budget.held_bytes(), 300);
  }
  EXPECT_EQ(budget.held_bytes(), 0);
}

TEST(MemoryBudget, ReservationAllocatesWithinItsBytesOnly) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  auto r = budget.Reserve(1000, absl::InfiniteFuture());
  ASSERT_TRUE(r.ok());
  auto p = r->Allocate(600, kNoStream);
  ASSERT_TRUE(p.ok()) << p.status();
  std::memset(*p, 0x5a, 600);
  auto over = r->Allocate(401, kNoStream);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Contains(over.status(), "401") && Contains(over.status(), "600") &&
              Contains(over.status(), "1000"))
      << over.status();
  EXPECT_EQ(host.calls(), 1) << "an overdraft must not reach the upstream";
  auto rest = r->Allocate(400, kNoStream);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(r->allocated_bytes(), 1000);
  r->Deallocate(*p, 600, kNoStream);
  r->Deallocate(*rest, 400, kNoStream);
  EXPECT_EQ(r->allocated_bytes(), 0);
  EXPECT_EQ(host.in_use(), 0);
}

TEST(MemoryBudget, UpstreamFailureChargesNothing) {
  HostUpstream host;
  MemoryBudget budget(host, 1000);
  auto r = budget.Reserve(1000, absl::InfiniteFuture());
  ASSERT_TRUE(r.ok());
  host.set_fail(true);
  EXPECT_EQ(r->Allocate(100, kNoStream).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r->allocated_bytes(), 0);
  host.set_fail(false);
  auto p = r->Allocate(1000, kNoStream);
  ASSERT_TRUE(p.ok()) << p.status();
  r->Deallocate(*p, 1000, kNoStream);
}

TEST(StatisticsResource, CountsBytesPeakAndAllocations) {
  HostUpstream host;
  StatisticsResource stats(host);
  auto a = stats.Allocate(100, kNoStream);
  auto b = stats.Allocate(250, kNoStream);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(stats.used_bytes(), 350);
  EXPECT_EQ(stats.peak_used_bytes(), 350);
  stats.Deallocate(*a, 100, kNoStream);
  EXPECT_EQ(stats.used_bytes(), 250);
  EXPECT_EQ(stats.peak_used_bytes(), 350);
  EXPECT_EQ(stats.allocations(), 2);
  host.set_fail(true);
  EXPECT_FALSE(stats.Allocate(10, kNoStream).ok());
  EXPECT_EQ(stats.allocations(), 2) << "a failed allocation is not counted";
  EXPECT_EQ(stats.used_bytes(), 250);
  host.set_fail(false);
  stats.Deallocate(*b, 250, kNoStream);
  EXPECT_EQ(stats.used_bytes(), 0);
}

TEST(StatisticsResource, GrowthIsAnAllocationThatRaisedTheUpstreamFootprint) {
  HostUpstream host;
  StatisticsResource stats(host);
  EXPECT_EQ(stats.growths(), 0);
  auto a = stats.Allocate(100, kNoStream);  // footprint 0 -> 1 block
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(stats.growths(), 1);
  auto b = stats.Allocate(100, kNoStream);  // within the block
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(stats.growths(), 1);
  stats.Deallocate(*a, 100, kNoStream);
  stats.Deallocate(*b, 100, kNoStream);
  auto reuse = stats.Allocate(HostUpstream::kBlock, kNoStream);  // reuses the kept block
  ASSERT_TRUE(reuse.ok());
  EXPECT_EQ(stats.growths(), 1);
  auto more = stats.Allocate(1, kNoStream);  // needs a second block
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(stats.growths(), 2);
  EXPECT_EQ(stats.footprint_bytes(), 2 * HostUpstream::kBlock);
  stats.Deallocate(*reuse, HostUpstream::kBlock, kNoStream);
  stats.Deallocate(*more, 1, kNoStream);
}

// The stack the server builds (budget over statistics over the pool), from
// many threads at once: what is in use never passes the limit, and every
// byte and every reservation comes back.
TEST(MemoryStack, ConcurrentRequestsStayUnderTheLimit) {
  HostUpstream host;
  StatisticsResource stats(host);
  constexpr int64_t kLimit = int64_t{1} << 20;
  MemoryBudget budget(stats, kLimit);
  const uint64_t seed = testing::FreshSeed();
  constexpr int kThreads = 8, kRequests = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      for (int i = 0; i < kRequests; ++i) {
        const int64_t first = 1 + int64_t(rng() % (kLimit / 4)),
                      second = 1 + int64_t(rng() % (kLimit / 4));
        auto r = budget.Reserve(first + second, absl::Now() + absl::Seconds(60));
        if (!r.ok()) {
          ++failures;
          continue;
        }
        auto a = r->Allocate(size_t(first), kNoStream);
        auto b = r->Allocate(size_t(second), kNoStream);
        if (!a.ok() || !b.ok()) {
          ++failures;
          continue;
        }
        std::memset(*a, 1, size_t(first));
        std::memset(*b, 2, size_t(second));
        r->Deallocate(*a, size_t(first), kNoStream);
        r->Deallocate(*b, size_t(second), kNoStream);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0) << "seed " << seed;
  EXPECT_LE(host.max_in_use(), kLimit) << "seed " << seed;
  EXPECT_EQ(stats.allocations(), 2 * kThreads * kRequests);
  EXPECT_EQ(stats.used_bytes(), 0);
  EXPECT_LE(stats.peak_used_bytes(), kLimit);
  EXPECT_EQ(budget.held_bytes(), 0);
  EXPECT_GE(stats.growths(), 1);
}

// A block of `bytes` reserved at its aligned size; CudaResidentMemory
// allocates the whole aligned size.
TensorBlocks::Block NewBlock(MemoryBudget& budget, size_t bytes) {
  auto r = budget.Reserve((int64_t(bytes) + 255) & ~int64_t{255}, absl::InfiniteFuture());
  EXPECT_TRUE(r.ok()) << r.status();
  auto data = r->Allocate(bytes, kNoStream);
  EXPECT_TRUE(data.ok()) << data.status();
  return TensorBlocks::Block{std::move(*r), *data, bytes};
}

TEST(TensorBlocks, AFreedBlockGoesToTheNextTensorOfItsSizeWithItsBytesStillReserved) {
  HostUpstream host;
  MemoryBudget budget(host, 1 << 20);
  TensorBlocks blocks(64 * 4096, kNoStream);  // blocks of up to 4096 bytes
  TensorBlocks::Block first = NewBlock(budget, 1024);
  void* const data = first.data;
  EXPECT_FALSE(blocks.Keep(std::move(first), 1024).has_value()) << "kept";
  EXPECT_EQ(blocks.kept_bytes(), 1024);
  EXPECT_EQ(budget.held_bytes(), 1024) << "a kept block stays charged to the budget";
  EXPECT_FALSE(blocks.Take(512).has_value()) << "only a block of the same aligned size is handed";
  auto again = blocks.Take(1024);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->data, data);
  EXPECT_EQ(again->allocated, 1024u) << "the allocation's own size, for its Deallocate";
  EXPECT_EQ(blocks.kept_bytes(), 0);
  EXPECT_FALSE(blocks.Take(1024).has_value()) << "each kept block is handed out once";
  EXPECT_EQ(host.calls(), 1) << "the second tensor allocated nothing";
  again->reservation.Deallocate(again->data, again->allocated, kNoStream);
}

TEST(TensorBlocks, BlocksOverTheBlockLimitOrTheCapacityAreHandedBack) {
  HostUpstream host;
  MemoryBudget budget(host, 1 << 20);
  TensorBlocks blocks(64 * 256, kNoStream);  // 16 KiB: small blocks of up to 256 bytes
  EXPECT_EQ(blocks.max_small_block_bytes(), 256);
  EXPECT_EQ(blocks.max_block_bytes(), 8192);
  auto big = blocks.Keep(NewBlock(budget, 8448), 8448);
  ASSERT_TRUE(big.has_value()) << "8448 bytes is over half the capacity";
  big->reservation.Deallocate(big->data, big->allocated, kNoStream);
  // Large blocks fill half the capacity at most.
  EXPECT_FALSE(blocks.Keep(NewBlock(budget, 4096), 4096).has_value());
  EXPECT_FALSE(blocks.Keep(NewBlock(budget, 4096), 4096).has_value());
  auto third = blocks.Keep(NewBlock(budget, 512), 512);
  ASSERT_TRUE(third.has_value()) << "the large half is full";
  third->reservation.Deallocate(third->data, third->allocated, kNoStream);
  EXPECT_EQ(blocks.kept_bytes(), 8192);
  auto large = blocks.Take(4096);
  ASSERT_TRUE(large.has_value());
  EXPECT_FALSE(blocks.Keep(NewBlock(budget, 512), 512).has_value()) << "room again";
  large->reservation.Deallocate(large->data, large->allocated, kNoStream);
  auto kept512 = blocks.Take(512);
  ASSERT_TRUE(kept512.has_value());
  kept512->reservation.Deallocate(kept512->data, kept512->allocated, kNoStream);
  auto kept4096 = blocks.Take(4096);
  ASSERT_TRUE(kept4096.has_value());
  kept4096->reservation.Deallocate(kept4096->data, kept4096->allocated, kNoStream);
  EXPECT_EQ(blocks.kept_bytes(), 0);
  // Small blocks may fill all of it.
  for (int i = 0; i < 64; ++i) EXPECT_FALSE(blocks.Keep(NewBlock(budget, 256), 256).has_value());
  EXPECT_EQ(blocks.kept_bytes(), 64 * 256);
  auto over = blocks.Keep(NewBlock(budget, 256), 256);
  ASSERT_TRUE(over.has_value()) << "the capacity is full";
  over->reservation.Deallocate(over->data, over->allocated, kNoStream);
}

// A 16-byte tensor's block reused for a 192-byte one of the same 256-byte
// class would be written past its allocation's end (CUDA then refuses
// copies from it): only blocks allocated at the class's size are kept.
TEST(TensorBlocks, ABlockAllocatedSmallerThanItsSizeClassIsHandedBack) {
  HostUpstream host;
  MemoryBudget budget(host, 1 << 20);
  TensorBlocks blocks(64 * 4096, kNoStream);
  auto back = blocks.Keep(NewBlock(budget, 16), 256);
  ASSERT_TRUE(back.has_value());
  back->reservation.Deallocate(back->data, back->allocated, kNoStream);
  EXPECT_EQ(blocks.kept_bytes(), 0);
}

TEST(TensorBlocks, ZeroCapacityKeepsNothingAndDestructionFreesWhatIsKept) {
  HostUpstream host;
  MemoryBudget budget(host, 1 << 20);
  {
    TensorBlocks none(0, kNoStream);
    auto back = none.Keep(NewBlock(budget, 256), 256);
    ASSERT_TRUE(back.has_value());
    back->reservation.Deallocate(back->data, back->allocated, kNoStream);
  }
  {
    TensorBlocks blocks(64 * 1024, kNoStream);
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(blocks.Keep(NewBlock(budget, 768), 768).has_value());
    EXPECT_EQ(host.in_use(), 5 * 768);
  }
  EXPECT_EQ(host.in_use(), 0) << "destroyed, the cache frees its blocks";
  EXPECT_EQ(budget.held_bytes(), 0) << "and their reservations end";
}

}  // namespace
}  // namespace gpucompute::server::cuda
