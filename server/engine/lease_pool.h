// A fixed set of items lent one at a time: Acquire waits for a free one and
// the lease gives it back when it ends. A device's request slots are lent
// this way.
//
// Each item has its own taken flag, so lending and returning take no shared
// lock: under load, eight threads taking one lock twice per request queued
// on it. A thread first tries the item it had last, so a thread keeps its
// own stream and the graphs cached on it. Only a caller that finds every
// item taken locks the pool's mutex and waits.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace gpucompute::server {

template <typename T>
class LeasePool {
 public:
  class Lease {
   public:
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_.Release(index_); }
    T& operator*() const { return *pool_.items_[index_]; }
    T* operator->() const { return pool_.items_[index_].get(); }

   private:
    friend class LeasePool;
    Lease(LeasePool& pool, size_t index) : pool_(pool), index_(index) {}
    LeasePool& pool_;
    size_t index_;
  };

  // `items` must not be empty.
  explicit LeasePool(std::vector<std::unique_ptr<T>> items)
      : items_(std::move(items)), taken_(items_.size()) {}

  Lease Acquire() {
    if (auto index = TryTake(); index >= 0) return Lease(*this, size_t(index));
    absl::MutexLock lock(&mu_);
    // Counted before the next look, so that a Release either sees this
    // waiter and signals, or frees its item before the look below.
    waiters_.fetch_add(1);
    for (;;) {
      if (auto index = TryTake(); index >= 0) {
        waiters_.fetch_sub(1);
        return Lease(*this, size_t(index));
      }
      freed_.Wait(&mu_);
    }
  }

  // An item for start-up work, before any lease is taken.
  T& first() { return *items_.front(); }

 private:
  // The index of an item now taken by this caller, or -1 if all are taken.
  ptrdiff_t TryTake() {
    // Threads are numbered as they first lend from any pool; a thread starts
    // at the item it took last time (or its own number) and goes round.
    static std::atomic<size_t> next_thread{0};
    thread_local size_t hint = next_thread.fetch_add(1, std::memory_order_relaxed);
    const size_t n = items_.size();
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (hint + i) % n;
      // Sequentially consistent, as Release's store and count: a waiter that
      // counted itself then looks, and sees the item a releaser freed.
      if (!taken_[k].load() && !taken_[k].exchange(true)) {
        hint = k;
        return ptrdiff_t(k);
      }
    }
    return -1;
  }

  void Release(size_t index) {
    taken_[index].store(false);
    if (waiters_.load() > 0) {
      absl::MutexLock lock(&mu_);
      freed_.Signal();
    }
  }

  std::vector<std::unique_ptr<T>> items_;
  std::vector<std::atomic<bool>> taken_;
  std::atomic<int> waiters_{0};
  absl::Mutex mu_;
  absl::CondVar freed_;
};

}  // namespace gpucompute::server
