// The textbook shared-memory tiling: each block stages a tile of A and a tile
// of B in shared memory, one output element per thread. 16-bit inputs are
// staged as they are, accumulate in float and are rounded once at the end.
#include "cuda/accumulate.cuh"
#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

template <typename T, typename Out, int kTile, int kPad>
__device__ __forceinline__ void TiledMatMulBody(const T* __restrict__ a, const T* __restrict__ b,
                                                Out* __restrict__ c, int64_t m, int64_t n,
                                                int64_t k) {
  __shared__ T as[kTile][kTile + kPad];
  __shared__ T bs[kTile][kTile + kPad];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = int64_t(blockIdx.y) * kTile + ty;
  const int64_t col = int64_t(blockIdx.x) * kTile + tx;
  Acc<T> acc = 0;
  for (int64_t t = 0; t < k; t += kTile) {
    // Out-of-range elements are zero so that tails add nothing.
    as[ty][tx] = (row < m && t + tx < k) ? a[row * k + t + tx] : Zero<T>();
    bs[ty][tx] = (t + ty < k && col < n) ? b[(t + ty) * n + col] : Zero<T>();
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc += Widen(as[ty][i]) * Widen(bs[i][tx]);
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = Narrow<Out>(acc);
}

template <typename T, typename Out, int kTile, int kPad>
__global__ void TiledMatMulKernel(const T* __restrict__ a, const T* __restrict__ b,
                                  Out* __restrict__ c, int64_t m, int64_t n, int64_t k) {
  TiledMatMulBody<T, Out, kTile, kPad>(a, b, c, m, n, k);
}

// The members of a batch on grid.z: the same body on each one's buffers.
template <typename T, typename Out, int kTile, int kPad>
__global__ void TiledMatMulBatchKernel(const __grid_constant__ LaunchMembers<T, Out> members,
                                       int64_t m, int64_t n, int64_t k) {
  const auto& x = members.at[blockIdx.z];
  TiledMatMulBody<T, Out, kTile, kPad>(x.a, x.b, x.out, m, n, k);
}

template <int kTile>
dim3 TiledGrid(int64_t m, int64_t n, int members = 1) {
  return dim3(unsigned(CeilDiv(n, kTile)), unsigned(CeilDiv(m, kTile)), unsigned(members));
}

template <typename T, typename Out, int kTile, int kPad>
cudaError_t Launch(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  if (CeilDiv(m, kTile) > 65535) return cudaErrorInvalidConfiguration;
  TiledMatMulKernel<T, Out, kTile, kPad>
      <<<TiledGrid<kTile>(m, n), dim3(kTile, kTile), 0, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

template <typename T, typename Out, int kTile, int kPad>
cudaError_t LaunchBatch(const LaunchMembers<T, Out>& members, int count, int64_t m, int64_t n,
                        int64_t k, cudaStream_t stream) {
  if (CeilDiv(m, kTile) > 65535) return cudaErrorInvalidConfiguration;
  TiledMatMulBatchKernel<T, Out, kTile, kPad>
      <<<TiledGrid<kTile>(m, n, count), dim3(kTile, kTile), 0, stream>>>(members, m, n, k);
  return cudaGetLastError();
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchTiledMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              int tile, bool padded, cudaStream_t stream) {
  if (tile == 16) {
    return padded ? Launch<T, Out, 16, 1>(a, b, c, m, n, k, stream)
                  : Launch<T, Out, 16, 0>(a, b, c, m, n, k, stream);
  }
  if (tile == 32) {
    return padded ? Launch<T, Out, 32, 1>(a, b, c, m, n, k, stream)
                  : Launch<T, Out, 32, 0>(a, b, c, m, n, k, stream);
  }
  return cudaErrorInvalidValue;
}

#define GPUCOMPUTE_TILED(T, Out)                                                             \
  template cudaError_t LaunchTiledMatMul<T, Out>(const T*, const T*, Out*, int64_t, int64_t, \
                                                 int64_t, int, bool, cudaStream_t);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_TILED)
#undef GPUCOMPUTE_TILED

namespace {

LaunchResult Tiled(const LaunchArgs& args, int tile, bool padded) {
  const auto launch = [&](const auto& t) {
    return LaunchTiledMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, tile, padded, t.stream);
  };
  return ForAnyElementType(args, launch);
}

template <int kTile, int kPad>
LaunchResult TiledBatch(const BatchLaunchArgs& args) {
  const Problem& p = args.p;
  const auto launch = [&](const auto& members) {
    using M = std::decay_t<decltype(members)>;
    return LaunchBatch<typename M::Element, typename M::Output, kTile, kPad>(
        members, args.count, p.m, p.n, p.k, args.stream);
  };
  return ForAnyElementType(args, launch);
}

}  // namespace

LaunchResult TiledMatMul16(const LaunchArgs& args) { return Tiled(args, 16, false); }
LaunchResult TiledMatMul32(const LaunchArgs& args) { return Tiled(args, 32, false); }
LaunchResult TiledMatMul32Padded(const LaunchArgs& args) { return Tiled(args, 32, true); }
LaunchResult TiledMatMul16Batch(const BatchLaunchArgs& args) { return TiledBatch<16, 0>(args); }
LaunchResult TiledMatMul32Batch(const BatchLaunchArgs& args) { return TiledBatch<32, 0>(args); }
LaunchResult TiledMatMul32PaddedBatch(const BatchLaunchArgs& args) {
  return TiledBatch<32, 1>(args);
}

}  // namespace gpucompute::kernels::cuda
