#include "server/cuda/staging.h"

#include <algorithm>

#include "server/cuda/cuda_status.h"

namespace gpucompute::server::cuda {

absl::StatusOr<std::unique_ptr<StagingBuffers>> StagingBuffers::Create(
    std::atomic<int64_t>& host_alloc_calls) {
  std::unique_ptr<StagingBuffers> s(new StagingBuffers);
  for (int i = 0; i < 2; ++i) {
    host_alloc_calls.fetch_add(1);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaHostAlloc(&s->chunk_[i], kChunkBytes, cudaHostAllocDefault),
                                    "cudaHostAlloc(staging)");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&s->done_[i], cudaEventDisableTiming),
                                    "cudaEventCreate(staging)");
  }
  return s;
}

StagingBuffers::~StagingBuffers() {
  for (int i = 0; i < 2; ++i) {
    if (chunk_[i]) cudaFreeHost(chunk_[i]);
    if (done_[i]) cudaEventDestroy(done_[i]);
  }
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
    // The DMA that last read this chunk buffer must be done before refilling it.
    if (i >= 2) GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(done_[b]), "upload wait");
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
    copier.Gather(static_cast<char*>(chunk_[b]), chunk_src);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(static_cast<char*>(device_dst) + offset, chunk_[b], len,
                        cudaMemcpyHostToDevice, stream),
        "upload cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(done_[b], stream), "upload event");
  }
  if (chunks > 0) {
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(done_[(chunks - 1) % 2]), "upload wait");
  }
  return absl::OkStatus();
}

absl::Status StagingBuffers::Download(void* host_dst, const void* device_src, size_t bytes,
                                      cudaStream_t stream, HostCopyPool& copier) {
  const size_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  auto enqueue = [&](size_t i) -> absl::Status {
    const int b = int(i % 2);
    const size_t offset = i * kChunkBytes, len = std::min(kChunkBytes, bytes - offset);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(chunk_[b], static_cast<const char*>(device_src) + offset, len,
                        cudaMemcpyDeviceToHost, stream),
        "download cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(done_[b], stream), "download event");
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
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(done_[b]), "download wait");
    copier.Copy(static_cast<char*>(host_dst) + offset, chunk_[b], len);
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::server::cuda
