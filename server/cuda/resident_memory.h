// A tensor's device memory: a reservation from the device's memory budget
// (the same one requests reserve from, so tensors and requests share the
// device) and one allocation from the pool within it. Destroyed, it frees
// the allocation on its stream, waits for that, and only then returns the
// reserved bytes to the budget.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/cuda/device_memory.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

class CudaResidentMemory final : public ResidentMemory {
 public:
  // `bytes` on device `ordinal` (the current one), allocated on `stream`
  // and waited for, so that any stream may use them at once.
  static absl::StatusOr<std::unique_ptr<CudaResidentMemory>> Allocate(
      DeviceMemory& memory, int ordinal, cudaStream_t stream, int64_t bytes, absl::Time deadline);
  ~CudaResidentMemory() override;

  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  int ordinal() const { return ordinal_; }

 private:
  CudaResidentMemory(MemoryBudget::Reservation reservation, void* data, int64_t bytes, int ordinal,
                     cudaStream_t stream)
      : reservation_(std::move(reservation)),
        data_(data),
        bytes_(bytes),
        ordinal_(ordinal),
        stream_(stream) {}

  MemoryBudget::Reservation reservation_;
  void* const data_;
  const int64_t bytes_;
  const int ordinal_;
  const cudaStream_t stream_;
};

}  // namespace gpucompute::server::cuda
