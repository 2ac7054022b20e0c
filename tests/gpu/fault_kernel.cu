// A kernel that writes through a bad device pointer, to provoke the sticky
// "illegal address" error a broken kernel leaves in a CUDA context.
#include <cuda_runtime.h>

namespace gpucompute::testing {

__global__ void WriteThroughBadPointer(float* p) { p[threadIdx.x] = 1.0f; }

cudaError_t LaunchIllegalAddressKernel(cudaStream_t stream) {
  WriteThroughBadPointer<<<1, 32, 0, stream>>>(reinterpret_cast<float*>(0x10));
  return cudaGetLastError();
}

}  // namespace gpucompute::testing
