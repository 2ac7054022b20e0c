#include "server/cuda/resident_memory.h"

#include <algorithm>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<CudaResidentMemory>> CudaResidentMemory::Allocate(
    DeviceMemory& memory, int ordinal, cudaStream_t stream, int64_t bytes, absl::Time deadline) {
  // A tensor waits for device memory no longer than a request would.
  auto reservation =
      memory.Reserve(AlignedBytes(bytes), std::min(deadline, absl::Now() + kMaxMemoryWait));
  if (!reservation.ok()) return reservation.status();
  auto data = reservation->Allocate(size_t(bytes), stream);
  if (!data.ok()) return data.status();
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "tensor allocation wait");
      !s.ok()) {
    reservation->Deallocate(*data, size_t(bytes), stream);
    return s;
  }
  return std::unique_ptr<CudaResidentMemory>(
      new CudaResidentMemory(std::move(*reservation), *data, bytes, ordinal, stream));
}

CudaResidentMemory::~CudaResidentMemory() {
  // Any thread may drop the last reference: make the tensor's device current.
  cudaSetDevice(ordinal_);
  reservation_.Deallocate(data_, size_t(bytes_), stream_);
  cudaStreamSynchronize(stream_);
}

}  // namespace gpucompute::server::cuda
