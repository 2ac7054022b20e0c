// The textbook kernel: one thread per output element, reading a row of A and
// a column of B straight from global memory. 16-bit inputs accumulate in
// float and are rounded once to the output type.
#include "cuda/accumulate.cuh"
#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

template <typename T, typename Out>
__device__ __forceinline__ void NaiveMatMulBody(const T* __restrict__ a, const T* __restrict__ b,
                                                Out* __restrict__ c, int64_t m, int64_t n,
                                                int64_t k) {
  // x walks columns so that a warp reads consecutive elements of B and C.
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  Acc<T> acc = 0;
  for (int64_t i = 0; i < k; ++i) acc += Widen(a[row * k + i]) * Widen(b[i * n + col]);
  c[row * n + col] = Narrow<Out>(acc);
}

template <typename T, typename Out>
__global__ void NaiveMatMulKernel(const T* __restrict__ a, const T* __restrict__ b,
                                  Out* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  NaiveMatMulBody(a, b, c, m, n, k);
}

// The members of a batch on grid.z: the same body on each one's buffers.
template <typename T, typename Out>
__global__ void NaiveMatMulBatchKernel(const __grid_constant__ LaunchMembers<T, Out> members,
                                       int64_t m, int64_t n, int64_t k) {
  const auto& x = members.at[blockIdx.z];
  NaiveMatMulBody(x.a, x.b, x.out, m, n, k);
}

dim3 NaiveGrid(int64_t m, int64_t n, int members = 1) {
  return dim3(unsigned(CeilDiv(n, 32)), unsigned(CeilDiv(m, 8)), unsigned(members));
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchNaiveMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream) {
  if (CeilDiv(m, 8) > 65535) return cudaErrorInvalidConfiguration;
  NaiveMatMulKernel<T, Out><<<NaiveGrid(m, n), dim3(32, 8), 0, stream>>>(a, b, c, m, n, k);
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
  return ForAnyElementType(args, launch);
}

LaunchResult NaiveMatMulBatch(const BatchLaunchArgs& args) {
  const Problem& p = args.p;
  if (CeilDiv(p.m, 8) > 65535) return cudaErrorInvalidConfiguration;
  const auto launch = [&](const auto& members) {
    using M = std::decay_t<decltype(members)>;
    NaiveMatMulBatchKernel<typename M::Element, typename M::Output>
        <<<NaiveGrid(p.m, p.n, args.count), dim3(32, 8), 0, args.stream>>>(members, p.m, p.n, p.k);
    return cudaGetLastError();
  };
  return ForAnyElementType(args, launch);
}

}  // namespace gpucompute::kernels::cuda
