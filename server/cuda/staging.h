// Host <-> device copies of request payloads through pinned staging buffers,
// chunked and double-buffered so that the host copy of one chunk overlaps the
// DMA of the previous one (pageable cudaMemcpy would stage through a driver
// buffer one piece at a time, far slower).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/host_copy.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

class StagingBuffers {
 public:
  static constexpr size_t kChunkBytes = size_t{8} << 20;

  // Two pinned chunks; counts the cudaHostAlloc calls in `host_alloc_calls`.
  static absl::StatusOr<std::unique_ptr<StagingBuffers>> Create(
      std::atomic<int64_t>& host_alloc_calls);

  // Queues the copy on `stream` and returns once every byte is in a staging
  // buffer: work queued after it on the stream sees the data, and the host
  // does not wait for the last DMA. `host_src` may be split in pieces (as
  // gRPC received it): the staging copy gathers them, so no contiguous copy
  // is ever made.
  absl::Status Upload(void* device_dst, const HostPieces& host_src, cudaStream_t stream,
                      HostCopyPool& copier);
  // Copies and waits until the data is on the host.
  absl::Status Download(void* host_dst, const void* device_src, size_t bytes, cudaStream_t stream,
                        HostCopyPool& copier);

  // Direct use of the pinned chunks (kChunkBytes each) by a caller that
  // orders its own copies and waits for them before the next use: first
  // waits until no queued DMA uses either chunk.
  absl::Status WaitIdle();
  char* chunk(int b) { return static_cast<char*>(chunk_[b].get()); }

 private:
  StagingBuffers() = default;
  // Waits for the last DMA that used chunk `b`, if one may still run.
  absl::Status WaitChunk(int b);

  UniquePinnedMemory chunk_[2];
  UniqueEvent done_[2];
  bool queued_[2] = {false, false};  // a DMA on chunk b was queued and not waited for
};

}  // namespace gpucompute::server::cuda
