// CUDA's stream-ordered allocator as a MemoryResource: cudaMallocAsync from
// a cudaMemPool_t of its own that keeps freed memory, so steady-state
// requests reuse it instead of mapping new memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/memory_resource.h"

namespace gpucompute::server::cuda {

class StreamOrderedPool final : public MemoryResource {
 public:
  // A pool of device `ordinal`'s memory.
  static absl::StatusOr<std::unique_ptr<StreamOrderedPool>> Create(int ordinal);

  // Zero bytes still get a distinct pointer (one byte).
  absl::StatusOr<void*> Allocate(size_t bytes, Stream stream) override;
  void Deallocate(void* ptr, size_t bytes, Stream stream) override;
  int64_t footprint_bytes() const override { return reserved_bytes(); }

  int64_t reserved_bytes() const;  // held by the pool, in use or kept
  int64_t used_bytes() const;      // handed out now

 private:
  explicit StreamOrderedPool(UniqueMemPool pool) : pool_(std::move(pool)) {}

  UniqueMemPool pool_;
};

}  // namespace gpucompute::server::cuda
