// A byte budget over an upstream resource. A request reserves all it will
// need at once, waiting while others hold the budget, then allocates within
// its Reservation; the bytes go back to the budget when the Reservation ends.
// Reserving the whole at once means two requests never each hold part of the
// budget while waiting for the rest. One that can never fit, or does not fit
// before its deadline, gets RESOURCE_EXHAUSTED.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cuda/memory_resource.h"

namespace gpucompute::server::cuda {

class MemoryBudget {
 public:
  // `limit_bytes`: the most bytes reserved at once.
  MemoryBudget(MemoryResource& upstream, int64_t limit_bytes)
      : upstream_(upstream), limit_bytes_(limit_bytes) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Allocations from the upstream within reserved bytes; gives them back to
  // the budget when destroyed (deallocate first: the bytes are not tracked).
  class Reservation final : public MemoryResource {
   public:
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&&) = delete;
    ~Reservation() override;

    // RESOURCE_EXHAUSTED, without asking the upstream, past the reserved bytes.
    absl::StatusOr<void*> Allocate(size_t bytes, Stream stream) override;
    void Deallocate(void* ptr, size_t bytes, Stream stream) override;
    int64_t footprint_bytes() const override;

    int64_t reserved_bytes() const { return reserved_; }
    int64_t allocated_bytes() const { return allocated_; }

   private:
    friend class MemoryBudget;
    Reservation(MemoryBudget* budget, int64_t bytes) : budget_(budget), reserved_(bytes) {}

    MemoryBudget* budget_;  // null once moved from
    int64_t reserved_;
    int64_t allocated_ = 0;
  };

  // Blocks until `bytes` fit under the limit or `deadline` passes.
  absl::StatusOr<Reservation> Reserve(int64_t bytes, absl::Time deadline);

  int64_t limit_bytes() const { return limit_bytes_; }
  int64_t held_bytes() const;  // reserved now, over all reservations

 private:
  void Release(int64_t bytes);

  MemoryResource& upstream_;
  const int64_t limit_bytes_;
  mutable absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpucompute::server::cuda
