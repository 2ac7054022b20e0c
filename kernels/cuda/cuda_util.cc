#include "cuda/cuda_util.h"

#include <atomic>

namespace gpucompute::kernels::cuda {

int DeviceSmCount() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();
    return 132;
  }
  int sms = cache[device].load(std::memory_order_relaxed);
  if (sms > 0) return sms;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();
    return 132;
  }
  cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace gpucompute::kernels::cuda
