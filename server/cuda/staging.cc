#include "server/cuda/staging.h"

#include <algorithm>
#include <utility>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;
using kernels::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingBuffers::Create(
    std::atomic<int64_t>& host_alloc_calls) {
  std::unique_ptr<StagingBuffers> s(new StagingBuffers);
  for (int i = 0; i < 2; ++i) {
    auto chunk = PinnedHostAlloc(kChunkBytes, "cudaHostAlloc(staging)", host_alloc_calls);
    if (!chunk.ok()) return chunk.status();
    s->chunk_[i] = std::move(*chunk);
    auto done = CreateEvent(cudaEventDisableTiming);
    if (!done.ok()) return done.status();
    s->done_[i] = std::move(*done);
  }
  return s;
}

absl::Status StagingBuffers::WaitChunk(int b) {
  if (!queued_[b]) return absl::OkStatus();
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(done_[b].get()), "staging wait");
  queued_[b] = false;
  return absl::OkStatus();
}

absl::Status StagingBuffers::WaitIdle() {
  for (int b = 0; b < 2; ++b) {
    if (auto s = WaitChunk(b); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status StagingBuffers::Upload(void* device_dst, const HostPieces& host_src,
                                    cudaStream_t stream, HostCopyPool& copier) {
  size_t bytes = 0;
  for (const auto& p : host_src) bytes += p.size();
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  size_t piece = 0, piece_offset = 0;  // next source byte
  for (size_t i = 0; i < chunks; ++i) {
    const int b = int(i % 2);
    const size_t offset = i * kChunkBytes, len = std::min(kChunkBytes, bytes - offset);
    // The DMA that last used this chunk buffer must be done before refilling
    // it (also one of an earlier upload on the same stream).
    if (auto s = WaitChunk(b); !s.ok()) return s;
    HostPieces chunk_src;  // the source bytes of this chunk
    for (size_t filled = 0; filled < len;) {
      const size_t n = std::min(len - filled, host_src[piece].size() - piece_offset);
      chunk_src.emplace_back(host_src[piece].data() + piece_offset, n);
      filled += n;
      piece_offset += n;
      if (piece_offset == host_src[piece].size()) {
        ++piece;
        piece_offset = 0;
      }
    }
    copier.Gather(chunk(b), chunk_src);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(static_cast<char*>(device_dst) + offset,
                                                    chunk(b), len, cudaMemcpyHostToDevice, stream),
                                    "upload cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(done_[b].get(), stream), "upload event");
    queued_[b] = true;
  }
  return absl::OkStatus();
}

absl::Status StagingBuffers::Download(void* host_dst, const void* device_src, size_t bytes,
                                      cudaStream_t stream, HostCopyPool& copier) {
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  // A device-to-host copy into a chunk follows, in stream order, any upload
  // still reading it, so no host wait is needed before queueing.
  auto enqueue = [&](size_t i) -> absl::Status {
    const int b = int(i % 2);
    const size_t offset = i * kChunkBytes, len = std::min(kChunkBytes, bytes - offset);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(chunk(b), static_cast<const char*>(device_src) + offset, len,
                        cudaMemcpyDeviceToHost, stream),
        "download cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(done_[b].get(), stream), "download event");
    queued_[b] = true;
    return absl::OkStatus();
  };
  if (chunks > 0) {
    if (auto s = enqueue(0); !s.ok()) return s;
  }
  for (size_t i = 0; i < chunks; ++i) {
    // Chunk i+1 travels while chunk i is copied out of its staging buffer.
    if (i + 1 < chunks) {
      if (auto s = enqueue(i + 1); !s.ok()) return s;
    }
    const int b = int(i % 2);
    const size_t offset = i * kChunkBytes, len = std::min(kChunkBytes, bytes - offset);
    if (auto s = WaitChunk(b); !s.ok()) return s;
    copier.Copy(static_cast<char*>(host_dst) + offset, chunk(b), len);
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::server::cuda
