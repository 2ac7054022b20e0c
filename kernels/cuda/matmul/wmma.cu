// Tensor cores through nvcuda::wmma: a 128x128 block tile computed by 8
// warps, each owning a 64x32 warp tile of 4x2 16x16 float accumulator
// fragments, fed with 16x16x16 FP16 or BF16 fragments from shared memory.
// k-tiles move global -> shared with cp.async in a multi-stage ring, so the
// loads of later tiles are in flight while the tensor cores work on the
// current one. The float sums are rounded once to the output type.
//
// Any m, n, k: staged tiles are zero-filled where they leave the matrices
// (zeros add nothing to the sums), and every output goes through shared
// memory to bounds-checked stores. cp.async moves 16-byte chunks, so it needs
// k and n multiples of 8 and 16-byte aligned inputs; other shapes stage
// element by element through registers.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/matmul/accumulate.cuh"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kThreads = 256;
constexpr int kWarpM = 64;
constexpr int kWarpN = 32;
constexpr int kFragsM = kWarpM / 16;
constexpr int kFragsN = kWarpN / 16;
constexpr int kWarpsN = kBN / kWarpN;
// Eight 16-bit elements of padding per shared row: the eight rows one
// ldmatrix phase reads then start on eight different 16-byte bank groups
// (row strides of 80, 144 and 272 bytes), and every row and fragment stays
// 32-byte aligned as wmma requires.
constexpr int kPad = 8;
constexpr int kLdB = kBN + kPad;
// The epilogue's float staging of one warp tile; 36 keeps rows 16-byte
// aligned and a warp's row reads on distinct banks.
constexpr int kLdC = kWarpN + 4;
// Consecutive blocks walk down a band of this many block rows before moving
// right, so that the tiles of A and B they share are still in L2.
constexpr int64_t kGroupRows = 8;

template <int kBK>
struct Layout {
  static constexpr int kLdA = kBK + kPad;
  static constexpr int kAElements = kBM * kLdA;
  static constexpr int kStageElements = kAElements + kBK * kLdB;
};

template <int kBK, int kStages>
constexpr size_t SharedBytes() {
  const size_t pipeline = size_t(kStages) * Layout<kBK>::kStageElements * 2;
  const size_t epilogue = size_t(kThreads / 32) * kWarpM * kLdC * sizeof(float);
  return std::max(pipeline, epilogue);
}

__device__ __forceinline__ void CopyAsync16(void* shared, const void* global, bool inside) {
  const unsigned to = unsigned(__cvta_generic_to_shared(shared));
  // A source size of 0 reads nothing and fills the 16 bytes with zeros.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(global),
               "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Stages the k-tile starting at k0: A rows [row0, row0 + kBM) and B columns
// [col0, col0 + kBN), zeros outside the matrices.
template <typename T, int kBK, bool kChunks>
__device__ __forceinline__ void LoadTile(T* as, T* bs, const T* __restrict__ a,
                                         const T* __restrict__ b, int64_t m, int64_t n, int64_t k,
                                         int64_t row0, int64_t col0, int64_t k0, int tid) {
  constexpr int kLdA = Layout<kBK>::kLdA;
  if constexpr (kChunks) {
    // 8 elements a chunk; k and n are multiples of 8, so a chunk is wholly
    // inside or wholly outside.
    constexpr int kAChunksPerRow = kBK / 8;
    constexpr int kBChunksPerRow = kBN / 8;
#pragma unroll
    for (int i = 0; i < kBM * kAChunksPerRow / kThreads; ++i) {
      const int chunk = tid + i * kThreads;
      const int r = chunk / kAChunksPerRow, c = (chunk % kAChunksPerRow) * 8;
      const bool inside = row0 + r < m && k0 + c < k;
      CopyAsync16(as + r * kLdA + c, inside ? a + (row0 + r) * k + k0 + c : a, inside);
    }
#pragma unroll
    for (int i = 0; i < kBK * kBChunksPerRow / kThreads; ++i) {
      const int chunk = tid + i * kThreads;
      const int r = chunk / kBChunksPerRow, c = (chunk % kBChunksPerRow) * 8;
      const bool inside = k0 + r < k && col0 + c < n;
      CopyAsync16(bs + r * kLdB + c, inside ? b + (k0 + r) * n + col0 + c : b, inside);
    }
  } else {
    for (int e = tid; e < kBM * kBK; e += kThreads) {
      const int r = e / kBK, c = e % kBK;
      as[r * kLdA + c] = row0 + r < m && k0 + c < k ? a[(row0 + r) * k + k0 + c] : Zero<T>();
    }
    for (int e = tid; e < kBK * kBN; e += kThreads) {
      const int r = e / kBN, c = e % kBN;
      bs[r * kLdB + c] = k0 + r < k && col0 + c < n ? b[(k0 + r) * n + col0 + c] : Zero<T>();
    }
  }
}

template <typename T, typename Out, int kBK, int kStages, int kMinBlocks, bool kChunks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    WmmaMatMulKernel(const T* __restrict__ a, const T* __restrict__ b, Out* __restrict__ c,
                     int64_t m, int64_t n, int64_t k) {
  using L = Layout<kBK>;
  extern __shared__ __align__(128) unsigned char shared[];
  T* const stages = reinterpret_cast<T*>(shared);

  // Block tile (row, column) from the linear block index, banded for L2.
  const int64_t tiles_m = CeilDivDevice(m, kBM), tiles_n = CeilDivDevice(n, kBN);
  const int64_t block = blockIdx.x;
  const int64_t band = block / (kGroupRows * tiles_n);
  const int64_t first = band * kGroupRows;
  const int64_t band_rows = min(tiles_m - first, kGroupRows);
  const int64_t in_band = block % (kGroupRows * tiles_n);
  const int64_t row0 = (first + in_band % band_rows) * kBM;
  const int64_t col0 = (in_band / band_rows) * kBN;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int warp_row = (warp / kWarpsN) * kWarpM;
  const int warp_col = (warp % kWarpsN) * kWarpN;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  auto stage_a = [&](int s) { return stages + s * L::kStageElements; };
  auto stage_b = [&](int s) { return stages + s * L::kStageElements + L::kAElements; };

  const int64_t tiles = CeilDivDevice(k, kBK);
  // Fill all stages but one; every step commits a group (empty ones too), so
  // that "all but kStages - 2 groups done" always means "tile t has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) LoadTile<T, kBK, kChunks>(stage_a(s), stage_b(s), a, b, m, n, k, row0, col0,
                                              int64_t(s) * kBK, tid);
    CommitCopies();
  }
  for (int64_t t = 0; t < tiles; ++t) {
    WaitCopies<kStages - 2>();
    // Tile t is visible to all, and every warp is done with tile t - 1,
    // whose stage the next load overwrites.
    __syncthreads();
    const int64_t next = t + kStages - 1;
    if (next < tiles) {
      const int s = int(next % kStages);
      LoadTile<T, kBK, kChunks>(stage_a(s), stage_b(s), a, b, m, n, k, row0, col0, next * kBK,
                                tid);
    }
    CommitCopies();

    const T* as = stage_a(int(t % kStages)) + warp_row * L::kLdA;
    const T* bs = stage_b(int(t % kStages)) + warp_col;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[kFragsM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
        wmma::load_matrix_sync(fa[i], as + i * 16 * L::kLdA + kk, L::kLdA);
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) wmma::load_matrix_sync(fb[j], bs + kk * kLdB + j * 16, kLdB);
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }

  // The pipeline's shared memory becomes each warp's float staging.
  WaitCopies<0>();
  __syncthreads();
  float* cs = reinterpret_cast<float*>(shared) + warp * kWarpM * kLdC;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
      wmma::store_matrix_sync(cs + i * 16 * kLdC + j * 16, acc[i][j], kLdC, wmma::mem_row_major);
  __syncwarp();
  const int lane = tid % 32;
  const int64_t col = col0 + warp_col + lane;
  if (col >= n) return;
  const int64_t rows = min(int64_t(kWarpM), m - (row0 + warp_row));
  Out* out = c + (row0 + warp_row) * n + col;
  for (int r = 0; r < rows; ++r) out[r * n] = Round<Out>(cs[r * kLdC + lane]);
}

template <typename T, typename Out, int kBK, int kStages, int kMinBlocks, bool kChunks>
cudaError_t LaunchConfig(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream) {
  auto* kernel = &WmmaMatMulKernel<T, Out, kBK, kStages, kMinBlocks, kChunks>;
  constexpr size_t kShared = SharedBytes<kBK, kStages>();
  // Over 48 KB of dynamic shared memory must be opted into, per kernel and
  // per device: once for each device this process launches it on.
  static std::atomic<uint64_t> opted_in{0};
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if ((opted_in.load(std::memory_order_relaxed) & bit) == 0 || bit == 0) {
    const cudaError_t err =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kShared));
    if (err != cudaSuccess) return err;
    opted_in.fetch_or(bit, std::memory_order_relaxed);
  }
  const int64_t blocks = CeilDiv(m, kBM) * CeilDiv(n, kBN);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  kernel<<<unsigned(blocks), kThreads, kShared, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

template <typename T, typename Out, int kBK, int kStages, int kMinBlocks>
cudaError_t Launch(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const bool chunks = k % 8 == 0 && n % 8 == 0 && Aligned16(a) && Aligned16(b);
  return chunks ? LaunchConfig<T, Out, kBK, kStages, kMinBlocks, true>(a, b, c, m, n, k, stream)
                : LaunchConfig<T, Out, kBK, kStages, kMinBlocks, false>(a, b, c, m, n, k, stream);
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchWmmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                             cudaStream_t stream) {
  return Launch<T, Out, 32, 4, 2>(a, b, c, m, n, k, stream);
}

template cudaError_t LaunchWmmaMatMul<__half, __half>(const __half*, const __half*, __half*,
                                                      int64_t, int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchWmmaMatMul<__half, float>(const __half*, const __half*, float*, int64_t,
                                                     int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchWmmaMatMul<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*,
                                                                    const __nv_bfloat16*,
                                                                    __nv_bfloat16*, int64_t,
                                                                    int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchWmmaMatMul<__nv_bfloat16, float>(const __nv_bfloat16*,
                                                            const __nv_bfloat16*, float*, int64_t,
                                                            int64_t, int64_t, cudaStream_t);

cudaError_t LaunchWmmaMatMulConfig(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                                   int64_t m, int64_t n, int64_t k, int bk, int stages,
                                   int min_blocks, cudaStream_t stream) {
  using T = __nv_bfloat16;
  if (bk == 32 && stages == 4 && min_blocks == 2) return Launch<T, T, 32, 4, 2>(a, b, c, m, n, k, stream);
  if (bk == 32 && stages == 3 && min_blocks == 2) return Launch<T, T, 32, 3, 2>(a, b, c, m, n, k, stream);
  if (bk == 32 && stages == 4 && min_blocks == 1) return Launch<T, T, 32, 4, 1>(a, b, c, m, n, k, stream);
  if (bk == 64 && stages == 3 && min_blocks == 1) return Launch<T, T, 64, 3, 1>(a, b, c, m, n, k, stream);
  if (bk == 64 && stages == 4 && min_blocks == 1) return Launch<T, T, 64, 4, 1>(a, b, c, m, n, k, stream);
  return cudaErrorInvalidValue;
}

LaunchResult WmmaMatMul(const LaunchArgs& args) {
  return ForHalfElementType(args, [](const auto& t) {
    return LaunchWmmaMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
