// The textbook kernel: one thread per output element, reading a row of A and
// a column of B straight from global memory.
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

template <typename T>
__global__ void NaiveMatMulKernel(const T* __restrict__ a, const T* __restrict__ b,
                                  T* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  // x walks columns so that a warp reads consecutive elements of B and C.
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  T acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += a[row * k + i] * b[i * n + col];
  c[row * n + col] = acc;
}

}  // namespace

template <typename T>
cudaError_t LaunchNaiveMatMul(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream) {
  const dim3 block(32, 8);
  if ((m + block.y - 1) / block.y > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(unsigned((n + block.x - 1) / block.x), unsigned((m + block.y - 1) / block.y));
  NaiveMatMulKernel<T><<<grid, block, 0, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

template cudaError_t LaunchNaiveMatMul<float>(const float*, const float*, float*, int64_t, int64_t,
                                              int64_t, cudaStream_t);
template cudaError_t LaunchNaiveMatMul<double>(const double*, const double*, double*, int64_t,
                                               int64_t, int64_t, cudaStream_t);

LaunchResult NaiveMatMul(const LaunchArgs& args) {
  return ForElementType(args, [](const auto& t) {
    return LaunchNaiveMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
