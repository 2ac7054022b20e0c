// The tensor store without a server: ids (unique, 128 random bits, naming
// the instance), shared ownership (a release while in use frees at the end
// of the use), idle lifetimes (renewed by use, expired by the store's own
// thread), the budget, and foreign or malformed ids.
#include "server/engine/tensor_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bitset>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/engine/tensor_transfers.h"
#include "support/host_device.h"

namespace gpucompute::server {
namespace {

// Host memory that counts how much of it is alive.
class CountedMemory final : public ResidentMemory {
 public:
  CountedMemory(int64_t bytes, std::atomic<int64_t>& live) : data_(size_t(bytes)), live_(live) {
    live_ += bytes;
  }
  ~CountedMemory() override { live_ -= bytes(); }
  void* data() const override { return const_cast<char*>(data_.data()); }
  int64_t bytes() const override { return int64_t(data_.size()); }

 private:
  std::vector<char> data_;
  std::atomic<int64_t>& live_;
};

class FakeDevice final : public testing::HostDevice {
 public:
  explicit FakeDevice(std::string name) : HostDevice(std::move(name)) {}
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int64_t bytes,
                                                                   absl::Time) override {
    if (fail_next) {
      fail_next = false;
      return absl::ResourceExhaustedError("device full");
    }
    return std::make_unique<CountedMemory>(bytes, live);
  }

  std::atomic<int64_t> live{0};
  bool fail_next = false;

 private:
  DeviceDescription description_;
  Ceilings ceilings_;
};

TensorShape Floats(int64_t rows, int64_t cols) {
  return TensorShape{kernels::DType::kFloat32, rows, cols};
}

TensorStoreOptions Options(int64_t limit, absl::Duration ttl = absl::Minutes(10)) {
  TensorStoreOptions o;
  o.limit_bytes = limit;
  o.default_ttl = ttl;
  o.instance = "node-7:50051";
  return o;
}

TEST(TensorStore, IdsAreUniqueCarry128RandomBitsAndNameTheInstance) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20));
  std::set<std::string> ids;
  // Across ids every one of the 128 bits takes both values: none is fixed.
  std::bitset<128> seen_one, seen_zero;
  for (int i = 0; i < 1000; ++i) {
    auto t = store.Create(device, Floats(1, 1), absl::InfiniteFuture());
    ASSERT_TRUE(t.ok()) << t.status();
    const std::string id = (*t)->id();
    ASSERT_EQ(id.size(), 32 + 1 + store.instance().size());
    EXPECT_EQ(id.substr(32), "@node-7:50051");
    for (int nibble = 0; nibble < 32; ++nibble) {
      const int v = std::stoi(id.substr(size_t(nibble), 1), nullptr, 16);
      for (int b = 0; b < 4; ++b) ((v >> b) & 1 ? seen_one : seen_zero).set(size_t(nibble * 4 + b));
    }
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_TRUE(seen_one.all());
  EXPECT_TRUE(seen_zero.all());
}

TEST(TensorStore, AddListUseAndRelease) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20));
  auto t = store.Create(device, Floats(3, 4), absl::InfiniteFuture());
  ASSERT_TRUE(t.ok());
  const std::string id = (*t)->id();
  // Unlisted until added.
  EXPECT_EQ(store.Use(id, "x").status().code(), absl::StatusCode::kNotFound);
  const TensorInfo info = store.Add(*t, absl::ZeroDuration());
  EXPECT_EQ(info.id, id);
  EXPECT_EQ(info.bytes, 48);
  EXPECT_EQ(info.device, "cpu");
  EXPECT_EQ(info.server, "node-7:50051");
  EXPECT_GT(info.expires, absl::Now() + absl::Minutes(9));
  ASSERT_EQ(store.List().size(), 1u);
  auto used = store.Use(id, "a.tensor_id");
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(used->get(), t->get());
  const auto released = store.Release({id, id, "unknown"});
  EXPECT_EQ(released.count, 1);
  EXPECT_EQ(released.bytes, 48);
  auto gone = store.Use(id, "a.tensor_id");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("a.tensor_id"), std::string::npos);
  EXPECT_NE(gone.status().message().find(id), std::string::npos);
}

TEST(TensorStore, AReleasedTensorInUseIsFreedWhenTheUseEnds) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20));
  auto t = store.Create(device, Floats(16, 16), absl::InfiniteFuture());
  ASSERT_TRUE(t.ok());
  const std::string id = (*t)->id();
  store.Add(std::move(*t), absl::ZeroDuration());
  std::shared_ptr<Tensor> in_use = *store.Use(id, "input.tensor_id");
  EXPECT_EQ(store.Release({id}).count, 1);
  EXPECT_TRUE(store.List().empty());
  EXPECT_EQ(device.live.load(), 1024);  // the op still reads it
  EXPECT_EQ(store.counters().held_bytes, 1024);
  in_use.reset();  // the op ends
  EXPECT_EQ(device.live.load(), 0);
  EXPECT_EQ(store.counters().held_bytes, 0);
}

TEST(TensorStore, AnUnlistedTensorDroppedHoldsNothing) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20));
  {
    auto t = store.Create(device, Floats(100, 100), absl::InfiniteFuture());
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(store.counters().held_bytes, 40000);
  }  // an upload that failed half-way
  EXPECT_EQ(store.counters().held_bytes, 0);
  EXPECT_EQ(device.live.load(), 0);
}

TEST(TensorStore, TheBudgetRefusesWithHeldAskedAndLimitThenRecovers) {
  FakeDevice device("cpu");
  TensorStore store(Options(1000));
  auto a = store.Create(device, Floats(100, 2), absl::InfiniteFuture());  // 800 bytes
  ASSERT_TRUE(a.ok());
  auto b = store.Create(device, Floats(100, 1), absl::InfiniteFuture());  // 400 more
  ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(b.status().message().find("held 800 bytes, asked 400 bytes, limit 1000 bytes"),
            std::string::npos)
      << b.status();
  EXPECT_TRUE(store.Create(device, Floats(50, 1), absl::InfiniteFuture()).ok());  // 200 fits
  a->reset();
  EXPECT_TRUE(store.Create(device, Floats(100, 2), absl::InfiniteFuture()).ok());
  // A device that cannot give the memory refunds the charge.
  device.fail_next = true;
  EXPECT_FALSE(store.Create(device, Floats(10, 10), absl::InfiniteFuture()).ok());
  EXPECT_EQ(store.counters().held_bytes, 0);
}

TEST(TensorStore, ExpiryDropsIdleTensorsAndUseRenewsThem) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20, absl::Hours(1)));
  auto idle = store.Create(device, Floats(1, 1), absl::InfiniteFuture());
  auto used = store.Create(device, Floats(1, 1), absl::InfiniteFuture());
  ASSERT_TRUE(idle.ok() && used.ok());
  const std::string idle_id = (*idle)->id(), used_id = (*used)->id();
  store.Add(std::move(*idle), absl::Milliseconds(300));
  store.Add(std::move(*used), absl::Milliseconds(300));
  // Nothing is due before its deadline.
  EXPECT_EQ(store.ExpireDue(absl::Now()), 0);
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(store.Use(used_id, "x").ok());  // now due 300 ms from here
  absl::SleepFor(absl::Milliseconds(150));
  store.ExpireDue(absl::Now());  // (the store's thread may have done it already)
  EXPECT_FALSE(store.Use(idle_id, "x").ok());
  EXPECT_TRUE(store.Use(used_id, "x").ok());
  store.ExpireDue(absl::Now() + absl::Seconds(1));
  EXPECT_FALSE(store.Use(used_id, "x").ok());
  EXPECT_EQ(store.counters().expired, 2);
  EXPECT_EQ(store.counters().held_bytes, 0);
  EXPECT_EQ(device.live.load(), 0);
}

// A use at an op's end (Touch) moves the deadline the listing shows, and
// the tensor outlives the deadline it was first scheduled at.
TEST(TensorStore, ATouchMovesTheDeadlineAndTheTensorOutlivesItsFirstOne) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20, absl::Hours(1)));
  auto created = store.Create(device, Floats(2, 2), absl::InfiniteFuture());
  ASSERT_TRUE(created.ok());
  const std::shared_ptr<Tensor> tensor = *created;
  const absl::Time first = store.Add(tensor, absl::Minutes(1)).expires;
  absl::SleepFor(absl::Milliseconds(5));
  TensorStore::Touch(*tensor);
  const absl::Time renewed = store.InfoOf(*tensor).expires;
  EXPECT_GT(renewed, first);
  ASSERT_EQ(store.List().size(), 1u);
  EXPECT_EQ(store.List().front().expires, renewed);
  EXPECT_EQ(store.ExpireDue(first), 0);
  EXPECT_TRUE(store.Use(tensor->id(), "x").ok());
  EXPECT_EQ(store.ExpireDue(absl::Now() + absl::Minutes(2)), 1);
  EXPECT_FALSE(store.Use(tensor->id(), "x").ok());
}

TEST(TensorStore, TheExpiryThreadRunsWithoutAnyCall) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20, absl::Milliseconds(50)));
  auto t = store.Create(device, Floats(8, 8), absl::InfiniteFuture());
  ASSERT_TRUE(t.ok());
  store.Add(std::move(*t), absl::ZeroDuration());
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (store.counters().expired == 0 && absl::Now() < until)
    absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(store.counters().expired, 1);
  EXPECT_EQ(device.live.load(), 0);
}

// The expiry thread sleeps until the earliest deadline it knows of: a
// tensor listed later with a shorter lifetime (most likely in another
// shard) must wake it early.
TEST(TensorStore, AShorterLifetimeListedLaterWakesTheExpiryThread) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 20, absl::Hours(1)));
  for (int i = 0; i < 4; ++i) {
    auto t = store.Create(device, Floats(4, 4), absl::InfiniteFuture());
    ASSERT_TRUE(t.ok());
    store.Add(std::move(*t), absl::Hours(1));
  }
  absl::SleepFor(absl::Milliseconds(20));  // the thread now sleeps for an hour
  std::vector<std::string> short_lived;
  for (int i = 0; i < 8; ++i) {
    auto t = store.Create(device, Floats(4, 4), absl::InfiniteFuture());
    ASSERT_TRUE(t.ok());
    short_lived.push_back((*t)->id());
    store.Add(std::move(*t), absl::Milliseconds(30 + 10 * i));
  }
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (store.counters().expired < 8 && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(store.counters().expired, 8);
  EXPECT_EQ(store.counters().tensors, 4);
  for (const std::string& id : short_lived) EXPECT_FALSE(store.Use(id, "x").ok());
}

// Calls on resident tensors from many threads at once, as a loaded server
// makes them: each thread lists outputs, uses them and releases them in
// batches while the expiry thread runs. Nothing is lost or counted twice.
TEST(TensorStore, ManyThreadsListUseAndReleaseWithoutLosingAny) {
  FakeDevice device("cpu");
  TensorStore store(Options(1 << 30, absl::Milliseconds(200)));
  constexpr int kThreads = 8, kEach = 400;
  std::atomic<int64_t> used{0}, released{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::vector<std::string> mine;
      for (int i = 0; i < kEach; ++i) {
        auto created = store.Create(device, Floats(2, 3), absl::InfiniteFuture());
        ASSERT_TRUE(created.ok());
        mine.push_back(store.Add(std::move(*created), absl::Minutes(1)).id);
        if (store.Use(mine[mine.size() / 2], "a.tensor_id").ok()) ++used;
        if (mine.size() == 64) {
          released += store.Release(mine).count;
          mine.clear();
        }
      }
      released += store.Release(mine).count;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(used.load(), int64_t(kThreads) * kEach);
  EXPECT_EQ(released.load(), int64_t(kThreads) * kEach);
  EXPECT_EQ(store.counters().created, int64_t(kThreads) * kEach);
  EXPECT_EQ(store.counters().tensors, 0);
  EXPECT_TRUE(store.List().empty());
  EXPECT_EQ(store.counters().held_bytes, 0);
  EXPECT_EQ(device.live.load(), 0);
}

TEST(TensorStore, ForeignAndMalformedIdsAreNotFoundSayingWhy) {
  TensorStore store(Options(1 << 20));
  auto foreign = store.Use(std::string(32, 'f') + "@node-9:50051", "b.tensor_id");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(foreign.status().message().find("held by instance \"node-9:50051\""), std::string::npos)
      << foreign.status();
  const std::vector<std::string> bad_ids = {"", "abc", std::string(32, 'g') + "@node-7:50051",
                                            std::string(31, 'a') + "@node-7:50051"};
  for (const std::string& bad : bad_ids) {
    auto r = store.Use(bad, "tensor_id");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << bad;
    EXPECT_NE(r.status().message().find("not a tensor id"), std::string::npos) << r.status();
  }
}

TEST(TensorStore, NewTensorsGoToTheDeviceHoldingTheLeast) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>("gpu0"));
  devices.push_back(std::make_unique<FakeDevice>("gpu1"));
  TensorStore store(Options(1 << 20));
  auto first = store.Create(*store.PlaceNew(devices), Floats(10, 10), absl::InfiniteFuture());
  ASSERT_TRUE(first.ok());
  Device* next = store.PlaceNew(devices);
  EXPECT_NE(next, &(*first)->device());
}

TEST(TensorTransfers, WriteThenReadAtOffsets) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>("cpu"));
  TensorStore store(Options(1 << 20));
  TensorTransfers transfers(store, devices, 2);
  absl::Notification created;
  std::shared_ptr<Tensor> tensor;
  transfers.Create(Floats(2, 2), absl::InfiniteFuture(),
                   [&](absl::StatusOr<std::shared_ptr<Tensor>> t) {
                     ASSERT_TRUE(t.ok());
                     tensor = *t;
                     created.Notify();
                   });
  created.WaitForNotification();
  const std::string a = "01234567", b = "89abcdef";
  absl::Notification written;
  transfers.Write(
      tensor, 0,
      {absl::Span<const char>(a.data(), a.size()), absl::Span<const char>(b.data(), b.size())},
      [&](absl::Status s) {
        EXPECT_TRUE(s.ok());
        written.Notify();
      });
  written.WaitForNotification();
  char out[6] = {};
  absl::Notification read;
  transfers.Read(tensor, 5, 6, out, [&](absl::Status s) {
    EXPECT_TRUE(s.ok());
    read.Notify();
  });
  read.WaitForNotification();
  EXPECT_EQ(std::string(out, 6), "56789a");
  // Out of range is refused, not written.
  absl::Notification refused;
  transfers.Read(tensor, 10, 7, out, [&](absl::Status s) {
    EXPECT_FALSE(s.ok());
    refused.Notify();
  });
  refused.WaitForNotification();
}

}  // namespace
}  // namespace gpucompute::server
