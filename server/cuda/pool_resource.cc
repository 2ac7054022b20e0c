#include "server/cuda/pool_resource.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

absl::StatusOr<std::unique_ptr<StreamOrderedPool>> StreamOrderedPool::Create(int ordinal) {
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = ordinal;
  cudaMemPool_t raw = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemPoolCreate(&raw, &props), "cudaMemPoolCreate");
  UniqueMemPool pool(raw);
  // Keep freed memory in the pool rather than giving it back to the driver.
  uint64_t keep = UINT64_MAX;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaMemPoolSetAttribute(pool.get(), cudaMemPoolAttrReleaseThreshold, &keep),
      "cudaMemPoolSetAttribute(release threshold)");
  return std::unique_ptr<StreamOrderedPool>(new StreamOrderedPool(std::move(pool)));
}

absl::StatusOr<void*> StreamOrderedPool::Allocate(size_t bytes, Stream stream) {
  void* ptr = nullptr;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaMallocFromPoolAsync(&ptr, bytes ? bytes : 1, pool_.get(), stream),
      "cudaMallocFromPoolAsync");
  return ptr;
}

void StreamOrderedPool::Deallocate(void* ptr, size_t, Stream stream) {
  if (ptr != nullptr) cudaFreeAsync(ptr, stream);
}

int64_t StreamOrderedPool::reserved_bytes() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_.get(), cudaMemPoolAttrReservedMemCurrent, &v);
  return int64_t(v);
}

int64_t StreamOrderedPool::used_bytes() const {
  uint64_t v = 0;
  cudaMemPoolGetAttribute(pool_.get(), cudaMemPoolAttrUsedMemCurrent, &v);
  return int64_t(v);
}

}  // namespace gpucompute::server::cuda
