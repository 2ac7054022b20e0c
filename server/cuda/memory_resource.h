// The one interface device memory is handed out through: allocate and
// deallocate in the order of a stream. The pool sits at the bottom; a budget
// and statistics are adaptors layered over it (RMM's device_memory_resource
// and resource adaptors are the model). No CUDA header here, so the adaptors
// that need no GPU build and are tested anywhere, over a host-memory fake.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

struct CUstream_st;

namespace gpucompute::server::cuda {

// cudaStream_t, named without the CUDA headers (it is the same type).
using Stream = CUstream_st*;

class MemoryResource {
 public:
  virtual ~MemoryResource() = default;

  // `bytes` usable from `stream`'s work queued after this call.
  virtual absl::StatusOr<void*> Allocate(size_t bytes, Stream stream) = 0;
  // Returns what Allocate(bytes, ...) gave, once `stream`'s work queued so
  // far is done with it.
  virtual void Deallocate(void* ptr, size_t bytes, Stream stream) = 0;
  // Bytes this resource holds from below it (the driver or its upstream),
  // handed out or kept for reuse: it grows when an allocation could not be
  // served from memory already held.
  virtual int64_t footprint_bytes() const = 0;
};

}  // namespace gpucompute::server::cuda
