// A device's slots, lent one per request: Acquire waits for a free one, and
// the lease gives it back when it ends.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "server/cuda/slot.h"

namespace gpucompute::server::cuda {

class SlotPool {
 public:
  class Lease {
   public:
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_.Release(slot_); }
    Slot& operator*() const { return *slot_; }
    Slot* operator->() const { return slot_; }

   private:
    friend class SlotPool;
    Lease(SlotPool& pool, Slot* slot) : pool_(pool), slot_(slot) {}
    SlotPool& pool_;
    Slot* slot_;
  };

  explicit SlotPool(std::vector<std::unique_ptr<Slot>> slots) : slots_(std::move(slots)) {
    for (auto& s : slots_) free_.push_back(s.get());
  }

  Lease Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](std::vector<Slot*>* free) { return !free->empty(); }, &free_));
    Slot* s = free_.back();
    free_.pop_back();
    return Lease(*this, s);
  }

  // A slot for start-up work, before any request is served.
  Slot& first() { return *slots_.front(); }

 private:
  void Release(Slot* slot) {
    absl::MutexLock lock(&mu_);
    free_.push_back(slot);
  }

  std::vector<std::unique_ptr<Slot>> slots_;
  absl::Mutex mu_;
  std::vector<Slot*> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server::cuda
