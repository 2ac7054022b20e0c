#include "server/cuda/cuda_handles.h"

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;
using kernels::cuda::CudaStatus;

absl::StatusOr<UniqueStream> CreateStream() {
  cudaStream_t stream = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                  "cudaStreamCreate");
  return UniqueStream(stream);
}

absl::StatusOr<UniqueEvent> CreateEvent(unsigned flags) {
  cudaEvent_t event = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreateWithFlags(&event, flags), "cudaEventCreate");
  return UniqueEvent(event);
}

absl::StatusOr<UniqueCublas> CreateCublas() {
  cublasHandle_t handle = nullptr;
  if (absl::Status s = CublasStatus(cublasCreate(&handle), "cublasCreate"); !s.ok()) return s;
  return UniqueCublas(handle);
}

absl::StatusOr<UniqueDeviceMemory> DeviceMalloc(size_t bytes, const char* what,
                                                std::atomic<int64_t>& calls) {
  calls.fetch_add(1);
  void* ptr = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMalloc(&ptr, bytes), what);
  return UniqueDeviceMemory(ptr);
}

absl::StatusOr<UniquePinnedMemory> PinnedHostAlloc(size_t bytes, const char* what,
                                                   std::atomic<int64_t>& calls) {
  calls.fetch_add(1);
  void* ptr = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault), what);
  return UniquePinnedMemory(ptr);
}

}  // namespace gpucompute::server::cuda
