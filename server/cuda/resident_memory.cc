#include "server/cuda/resident_memory.h"

#include <algorithm>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<CudaResidentMemory>> CudaResidentMemory::Allocate(
    DeviceMemory& memory, TensorBlocks& blocks, int ordinal, cudaStream_t stream, int64_t bytes,
    absl::Time deadline) {
  const int64_t aligned = AlignedBytes(bytes);
  if (auto kept = blocks.Take(aligned)) {
    return std::unique_ptr<CudaResidentMemory>(
        new CudaResidentMemory(std::move(*kept), blocks, bytes, ordinal, stream));
  }
  // A tensor waits for device memory no longer than a request would.
  auto reservation = memory.Reserve(aligned, std::min(deadline, absl::Now() + kMaxMemoryWait));
  if (!reservation.ok()) return reservation.status();
  // The whole aligned size: a later tensor of the same size class may be
  // larger than this one, and CUDA refuses a copy past an allocation's end.
  auto data = reservation->Allocate(size_t(aligned), stream);
  if (!data.ok()) return data.status();
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "tensor allocation wait");
      !s.ok()) {
    reservation->Deallocate(*data, size_t(aligned), stream);
    return s;
  }
  TensorBlocks::Block block{std::move(*reservation), *data, size_t(aligned)};
  return std::unique_ptr<CudaResidentMemory>(
      new CudaResidentMemory(std::move(block), blocks, bytes, ordinal, stream));
}

CudaResidentMemory::~CudaResidentMemory() {
  // The last reference goes once every op on the tensor has been waited
  // for, so the block is idle and the next tensor may take it as it is.
  auto returned = blocks_.Keep(std::move(block_), AlignedBytes(bytes_));
  if (!returned) return;
  // Any thread may drop the last reference: make the tensor's device current.
  cudaSetDevice(ordinal_);
  returned->reservation.Deallocate(returned->data, returned->allocated, stream_);
  cudaStreamSynchronize(stream_);
}

}  // namespace gpucompute::server::cuda
