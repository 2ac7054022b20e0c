// A tensor's device memory: a reservation from the device's memory budget
// (the same one requests reserve from, so tensors and requests share the
// device) and one allocation from the pool within it. A small tensor takes
// a block kept by TensorBlocks when one of its size is there, and gives its
// block back there when destroyed; otherwise it frees the allocation on its
// stream, waits for that, and only then returns the reserved bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/tensor_blocks.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

class CudaResidentMemory final : public ResidentMemory {
 public:
  // `bytes` on device `ordinal` (the current one), from `blocks` or
  // allocated on `stream` and waited for, so that any stream may use them
  // at once. `blocks` outlives the tensor.
  static absl::StatusOr<std::unique_ptr<CudaResidentMemory>> Allocate(
      DeviceMemory& memory, TensorBlocks& blocks, int ordinal, cudaStream_t stream, int64_t bytes,
      absl::Time deadline);
  ~CudaResidentMemory() override;

  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  int ordinal() const { return ordinal_; }

 private:
  CudaResidentMemory(TensorBlocks::Block block, TensorBlocks& blocks, int64_t bytes, int ordinal,
                     cudaStream_t stream)
      : block_(std::move(block)),
        blocks_(blocks),
        data_(block_.data),
        bytes_(bytes),
        ordinal_(ordinal),
        stream_(stream) {}

  TensorBlocks::Block block_;
  TensorBlocks& blocks_;
  void* const data_;
  const int64_t bytes_;
  const int ordinal_;
  const cudaStream_t stream_;
};

}  // namespace gpucompute::server::cuda
