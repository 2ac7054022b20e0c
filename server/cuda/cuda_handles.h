// Owning handles for CUDA and cuBLAS objects: each is released when its
// handle goes, so an object built from several of them that fails half-way
// frees what it had. Created on the current device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace gpucompute::server::cuda {

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct CublasDeleter {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
struct MemPoolDeleter {
  void operator()(cudaMemPool_t p) const { cudaMemPoolDestroy(p); }
};
struct DeviceMemoryDeleter {
  void operator()(void* p) const { cudaFree(p); }
};
struct PinnedMemoryDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};

using UniqueStream = std::unique_ptr<CUstream_st, StreamDeleter>;
using UniqueEvent = std::unique_ptr<CUevent_st, EventDeleter>;
using UniqueCublas = std::unique_ptr<cublasContext, CublasDeleter>;
using UniqueMemPool = std::unique_ptr<CUmemPoolHandle_st, MemPoolDeleter>;
using UniqueDeviceMemory = std::unique_ptr<void, DeviceMemoryDeleter>;
using UniquePinnedMemory = std::unique_ptr<void, PinnedMemoryDeleter>;

// A stream that does not synchronise with the legacy default stream.
absl::StatusOr<UniqueStream> CreateStream();
absl::StatusOr<UniqueEvent> CreateEvent(unsigned flags = cudaEventDefault);
absl::StatusOr<UniqueCublas> CreateCublas();
// cudaMalloc; counts the call in `calls`, made or failed.
absl::StatusOr<UniqueDeviceMemory> DeviceMalloc(size_t bytes, const char* what,
                                                std::atomic<int64_t>& calls);
// cudaHostAlloc; counts the call in `calls`, made or failed.
absl::StatusOr<UniquePinnedMemory> PinnedHostAlloc(size_t bytes, const char* what,
                                                   std::atomic<int64_t>& calls);

}  // namespace gpucompute::server::cuda
