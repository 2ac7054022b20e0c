#include "server/cuda/device_memory.h"

namespace gpucompute::server::cuda {

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Create(int ordinal, int64_t cap_bytes) {
  auto pool = StreamOrderedPool::Create(ordinal);
  if (!pool.ok()) return pool.status();
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(std::move(*pool), cap_bytes));
}

RequestMemory::~RequestMemory() {
  for (const auto& [ptr, bytes] : buffers_) reservation_.Deallocate(ptr, bytes, stream_);
  cudaStreamSynchronize(stream_);
}

absl::StatusOr<void*> RequestMemory::Get(int64_t bytes) {
  auto ptr = reservation_.Allocate(size_t(bytes), stream_);
  if (ptr.ok()) buffers_.emplace_back(*ptr, size_t(bytes));
  return ptr;
}

}  // namespace gpucompute::server::cuda
