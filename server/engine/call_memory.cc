#include "server/engine/call_memory.h"

#include <utility>

namespace gpucompute::server {

CallMemory::CallMemory(HostBufferPool* pool, std::optional<RegionSlice> out_region)
    : pool_(pool),
      out_region_(std::move(out_region)),
      out_dma_(out_region_ ? out_region_->region->dma_data(out_region_->offset, out_region_->bytes)
                           : nullptr) {}

CallMemory::~CallMemory() {
  if (pool_ == nullptr) return;
  if (result_) pool_->Release(std::move(result_));
  for (auto& copy : copies_) pool_->Release(std::move(copy));
}

std::unique_ptr<std::string> CallMemory::Acquire(size_t bytes) {
  // A reused buffer: a fresh one would page-fault and zero-fill every byte.
  return pool_ != nullptr ? pool_->Acquire(bytes) : std::make_unique<std::string>(bytes, '\0');
}

absl::StatusOr<CallMemory::Operand> CallMemory::Input(const RegionSlice& slice) {
  if (char* dma = slice.region->dma_data(slice.offset, slice.bytes)) {
    return Operand{{{dma, size_t(slice.bytes)}}, true};
  }
  std::unique_ptr<std::string> copy = Acquire(size_t(slice.bytes));
  if (auto s = slice.region->Read(slice.offset, slice.bytes, copy->data()); !s.ok()) return s;
  Operand operand{{{copy->data(), size_t(slice.bytes)}}, false};
  copies_.push_back(std::move(copy));
  return operand;
}

void* CallMemory::Output(size_t bytes) {
  if (out_dma_ != nullptr) return out_dma_;
  result_ = Acquire(bytes);
  return result_->data();
}

absl::Status CallMemory::Finish() {
  if (!out_region_ || out_dma_ != nullptr || !result_) return absl::OkStatus();
  return out_region_->region->Write(out_region_->offset, result_->data(), out_region_->bytes);
}

std::unique_ptr<std::string> CallMemory::TakeResult() {
  if (out_region_) return nullptr;
  return std::move(result_);
}

}  // namespace gpucompute::server
