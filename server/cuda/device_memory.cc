#include "server/cuda/device_memory.h"

#include <cstdint>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;
using kernels::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Create(int ordinal, int64_t cap_bytes) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t pool = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  // Keep freed memory in the pool: steady-state requests then reuse it
  // instead of mapping new memory.
  uint64_t keep = UINT64_MAX;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
      "cudaMemPoolSetAttribute(release threshold)");
  return std::unique_ptr<DeviceMemory>(new DeviceMemory(pool, cap_bytes));
}

DeviceMemory::~DeviceMemory() { cudaMemPoolDestroy(pool_); }

absl::Status DeviceMemory::Reserve(int64_t bytes, absl::Time wait_until) {
  if (bytes > cap_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request needs ", bytes, " bytes of device memory, more than this device's pool cap of ",
        cap_bytes_, " bytes (see --device_memory_fraction)"));
  }
  absl::MutexLock lock(&mu_);
  auto fits = [this, bytes]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return budget_used_ + bytes <= cap_bytes_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&fits), wait_until)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "not enough device memory: request needs ", bytes, " bytes, ", budget_used_, " of ",
        cap_bytes_, " bytes stayed in use by other requests until the wait ended"));
  }
  budget_used_ += bytes;
  return absl::OkStatus();
}

void DeviceMemory::Unreserve(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  budget_used_ -= bytes;
}

absl::StatusOr<void*> DeviceMemory::Allocate(size_t bytes, cudaStream_t stream) {
  void* ptr = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMallocFromPoolAsync(&ptr, bytes ? bytes : 1, pool_, stream),
                                  "cudaMallocFromPoolAsync");
  const int64_t reserved = reserved_bytes();
  int64_t seen = high_water_.load();
  while (reserved > seen) {
    if (high_water_.compare_exchange_weak(seen, reserved)) {
      growths_.fetch_add(1);
      break;
    }
  }
  return ptr;
}

void DeviceMemory::Free(void* ptr, cudaStream_t stream) {
  if (ptr != nullptr) cudaFreeAsync(ptr, stream);
}

int64_t DeviceMemory::reserved_bytes() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &v);
  return int64_t(v);
}

int64_t DeviceMemory::used_bytes() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &v);
  return int64_t(v);
}

}  // namespace gpucompute::server::cuda
