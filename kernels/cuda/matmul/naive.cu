// The textbook kernel: one thread per output element, reading a row of A and
// a column of B straight from global memory. 16-bit inputs accumulate in
// float and are rounded once to the output type.
#include "cuda/accumulate.cuh"
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

template <typename T, typename Out>
__global__ void NaiveMatMulKernel(const T* __restrict__ a, const T* __restrict__ b,
                                  Out* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  // x walks columns so that a warp reads consecutive elements of B and C.
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  Acc<T> acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += Widen(a[row * k + i]) * Widen(b[i * n + col]);
  c[row * n + col] = Narrow<Out>(acc);
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchNaiveMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream) {
  const dim3 block(32, 8);
  if ((m + block.y - 1) / block.y > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(unsigned((n + block.x - 1) / block.x), unsigned((m + block.y - 1) / block.y));
  NaiveMatMulKernel<T, Out><<<grid, block, 0, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

#define GPUCOMPUTE_NAIVE(T, Out)                                                             \
  template cudaError_t LaunchNaiveMatMul<T, Out>(const T*, const T*, Out*, int64_t, int64_t, \
                                                 int64_t, cudaStream_t);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_NAIVE)
#undef GPUCOMPUTE_NAIVE

LaunchResult NaiveMatMul(const LaunchArgs& args) {
  const auto launch = [](const auto& t) {
    return LaunchNaiveMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  };
  return IsHalfPrecision(args.p.dtype) ? ForHalfElementType(args, launch)
                                       : ForElementType(args, launch);
}

}  // namespace gpucompute::kernels::cuda
