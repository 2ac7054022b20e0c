#include "server/cuda/budget_resource.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute::server::cuda {

absl::StatusOr<MemoryBudget::Reservation> MemoryBudget::Reserve(int64_t bytes,
                                                                absl::Time deadline) {
  if (bytes > limit_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request needs ", bytes, " bytes of device memory, more than this device's pool cap of ",
        limit_bytes_, " bytes (see --device_memory_fraction)"));
  }
  absl::MutexLock lock(&mu_);
  auto fits = [this, bytes]()
                  ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ + bytes <= limit_bytes_; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&fits), deadline)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("not enough device memory: request needs ", bytes, " bytes, ", held_, " of ",
                     limit_bytes_, " bytes stayed in use by other requests until the wait ended"));
  }
  held_ += bytes;
  return Reservation(this, bytes);
}

int64_t MemoryBudget::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return held_;
}

void MemoryBudget::Release(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  held_ -= bytes;
}

MemoryBudget::Reservation::Reservation(Reservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)),
      reserved_(std::exchange(other.reserved_, 0)),
      allocated_(std::exchange(other.allocated_, 0)) {}

MemoryBudget::Reservation::~Reservation() {
  if (budget_ != nullptr) budget_->Release(reserved_);
}

absl::StatusOr<void*> MemoryBudget::Reservation::Allocate(size_t bytes, Stream stream) {
  if (budget_ == nullptr)
    return absl::FailedPreconditionError("allocation from a moved-from reservation");
  if (allocated_ + int64_t(bytes) > reserved_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation of ", bytes, " bytes exceeds its reservation: ", allocated_,
                     " of ", reserved_, " reserved bytes already allocated"));
  }
  auto ptr = budget_->upstream_.Allocate(bytes, stream);
  if (ptr.ok()) allocated_ += int64_t(bytes);
  return ptr;
}

void MemoryBudget::Reservation::Deallocate(void* ptr, size_t bytes, Stream stream) {
  budget_->upstream_.Deallocate(ptr, bytes, stream);
  allocated_ -= int64_t(bytes);
}

int64_t MemoryBudget::Reservation::footprint_bytes() const {
  return budget_->upstream_.footprint_bytes();
}

}  // namespace gpucompute::server::cuda
