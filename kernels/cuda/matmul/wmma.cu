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
//
// Config holds the tile shape and pipeline depth; the bench's ablation also
// times 128x256 block tiles (64x64 warp tiles), 3 stages and 64-deep k-tiles.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/accumulate.cuh"
#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

using namespace nvcuda;

constexpr int kBM = 128;
constexpr int kThreads = 256;
constexpr int kWarpM = 64;
constexpr int kWarpsN = 4;  // 8 warps as 2 x 4
constexpr int kFragsM = kWarpM / 16;
// Eight 16-bit elements of padding per shared row: the eight rows one
// ldmatrix phase reads then start on eight different 16-byte bank groups
// (row strides of 80, 144, 272 and 528 bytes), and every row and fragment
// stays 32-byte aligned as wmma requires.
constexpr int kPad = 8;
// Consecutive blocks walk down a band of this many block rows before moving
// right, so that the tiles of A and B they share are still in L2.
constexpr int64_t kGroupRows = 8;

// One configuration of the kernel: k-tile depth, pipeline stages, blocks per
// multiprocessor the register budget must allow, and warp tile width (32:
// 128x128 block tiles; 64: 128x256, twice the multiply-adds per fragment
// loaded, at twice the accumulator registers).
template <int kBK_, int kStages_, int kMinBlocks_, int kWarpN_>
struct Config {
  static constexpr int kBK = kBK_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int kWarpN = kWarpN_;
  static constexpr int kFragsN = kWarpN / 16;
  static constexpr int kBN = kWarpsN * kWarpN;
  static constexpr int kLdA = kBK + kPad;
  static constexpr int kLdB = kBN + kPad;
  static constexpr int kAElements = kBM * kLdA;
  static constexpr int kStageElements = kAElements + kBK * kLdB;
  // The epilogue's float staging of one warp tile; 4 floats of padding keep
  // rows 16-byte aligned and a warp's row reads on distinct banks.
  static constexpr int kLdC = kWarpN + 4;
  static constexpr size_t kSharedBytes = std::max(
      size_t(kStages) * kStageElements * 2, size_t(kThreads / 32) * kWarpM * kLdC * sizeof(float));
};
// The ladder's configuration, the best of the bench's ablation on an H200
// (BF16 4096^3): 319 TFLOP/s, against 318 with 3 stages, 288 with 128x256
// block tiles and 272 with k-tiles of 64 (one block per multiprocessor).
using DefaultConfig = Config<32, 4, 2, 32>;

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

// A 16x16 fragment of A or B from shared memory. FP16 goes through
// load_matrix_sync, which nvcc lowers to ldmatrix. For BF16 the header's
// load takes a generic address, and ptxas turns it into per-element generic
// loads (a third slower overall on an H200); the same wmma.load with the
// .shared state space, written out, fills the same fragment registers and
// becomes ldmatrix again.
template <typename Use>
__device__ __forceinline__ void LoadShared(
    wmma::fragment<Use, 16, 16, 16, __half, wmma::row_major>& f, const __half* p, unsigned ldm) {
  wmma::load_matrix_sync(f, p, ldm);
}
template <typename Use>
__device__ __forceinline__ void LoadShared(
    wmma::fragment<Use, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f, const __nv_bfloat16* p,
    unsigned ldm) {
  static_assert(sizeof(f.x) == 16, "a BF16 m16n16k16 A or B fragment is four 32-bit registers");
  unsigned* r = reinterpret_cast<unsigned*>(&f.x[0]);
  const unsigned at = unsigned(__cvta_generic_to_shared(p));
  if constexpr (std::is_same_v<Use, wmma::matrix_a>) {
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at), "r"(ldm));
  } else {
    asm volatile("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at), "r"(ldm));
  }
}

// Stages k-tiles of the block's A rows [row0, row0 + kBM) and B columns
// [col0, col0 + kBN) into a pipeline stage, zeros outside the matrices.
template <typename T, typename C, bool kChunks>
struct Stager;

// By 16-byte cp.async chunks of 8 elements: k and n are multiples of 8, so a
// chunk is wholly inside or wholly outside. A thread's chunks keep their
// column (A) or row (B) offsets from tile to tile, so their sources,
// destinations and row or column checks are worked out once, and a tile
// adds only its k offset and the k check.
template <typename T, typename C>
struct Stager<T, C, true> {
  static constexpr int kBK = C::kBK, kLdA = C::kLdA;
  static constexpr int kAPerRow = kBK / 8, kBPerRow = C::kBN / 8;
  static constexpr int kA = kBM * kAPerRow / kThreads, kB = kBK * kBPerRow / kThreads;
  static constexpr int kARowStep = kThreads / kAPerRow, kBRowStep = kThreads / kBPerRow;

  const T* a_src[kA];  // row start + column offset, k0 = 0
  bool a_row_inside[kA];
  unsigned a_dst[kA];  // byte offset in a stage
  int a_col;
  const T* b_src[kB];  // row r of the tile, k0 = 0
  int b_row[kB];
  unsigned b_dst[kB];
  bool b_col_inside;
  const T* a;
  const T* b;
  int64_t k, n;

  __device__ Stager(const T* a_, const T* b_, int64_t m, int64_t n_, int64_t k_, int64_t row0,
                    int64_t col0, int tid)
      : a(a_), b(b_), k(k_), n(n_) {
    a_col = (tid % kAPerRow) * 8;
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const int r = tid / kAPerRow + i * kARowStep;
      a_row_inside[i] = row0 + r < m;
      a_src[i] = a + (a_row_inside[i] ? row0 + r : 0) * k + a_col;
      a_dst[i] = unsigned((r * kLdA + a_col) * sizeof(T));
    }
    const int b_col = (tid % kBPerRow) * 8;
    b_col_inside = col0 + b_col < n;
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      b_row[i] = tid / kBPerRow + i * kBRowStep;
      b_src[i] = b + int64_t(b_row[i]) * n + (b_col_inside ? col0 + b_col : 0);
      b_dst[i] = unsigned((C::kAElements + b_row[i] * C::kLdB + b_col) * sizeof(T));
    }
  }

  __device__ __forceinline__ void Load(T* stage, int64_t k0) const {
    char* base = reinterpret_cast<char*>(stage);
    const bool a_k_inside = k0 + a_col < k;
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const bool inside = a_row_inside[i] && a_k_inside;
      CopyAsync16(base + a_dst[i], inside ? a_src[i] + k0 : a, inside);
    }
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const bool inside = b_col_inside && k0 + b_row[i] < k;
      CopyAsync16(base + b_dst[i], inside ? b_src[i] + k0 * n : b, inside);
    }
  }
};

// Element by element through registers, each bounds-checked.
template <typename T, typename C>
struct Stager<T, C, false> {
  const T* a;
  const T* b;
  int64_t m, n, k, row0, col0;
  int tid;

  __device__ Stager(const T* a_, const T* b_, int64_t m_, int64_t n_, int64_t k_, int64_t row0_,
                    int64_t col0_, int tid_)
      : a(a_), b(b_), m(m_), n(n_), k(k_), row0(row0_), col0(col0_), tid(tid_) {}

  __device__ __forceinline__ void Load(T* stage, int64_t k0) const {
    T* as = stage;
    T* bs = stage + C::kAElements;
    for (int e = tid; e < kBM * C::kBK; e += kThreads) {
      const int r = e / C::kBK, c = e % C::kBK;
      as[r * C::kLdA + c] = row0 + r < m && k0 + c < k ? a[(row0 + r) * k + k0 + c] : Zero<T>();
    }
    for (int e = tid; e < C::kBK * C::kBN; e += kThreads) {
      const int r = e / C::kBN, c = e % C::kBN;
      bs[r * C::kLdB + c] = k0 + r < k && col0 + c < n ? b[(k0 + r) * n + col0 + c] : Zero<T>();
    }
  }
};

template <typename T, typename Out, typename C, bool kChunks>
__global__ void __launch_bounds__(kThreads, C::kMinBlocks)
    WmmaMatMulKernel(const T* __restrict__ a, const T* __restrict__ b, Out* __restrict__ c,
                     int64_t m, int64_t n, int64_t k) {
  constexpr int kBK = C::kBK, kStages = C::kStages, kBN = C::kBN, kWarpN = C::kWarpN;
  constexpr int kFragsN = C::kFragsN, kLdA = C::kLdA, kLdB = C::kLdB, kLdC = C::kLdC;
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

  auto stage = [&](int s) { return stages + s * C::kStageElements; };
  const Stager<T, C, kChunks> stager(a, b, m, n, k, row0, col0, tid);

  const int64_t tiles = CeilDivDevice(k, kBK);
  // Fill all stages but one; every step commits a group (empty ones too), so
  // that "all but kStages - 2 groups done" always means "tile t has landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) stager.Load(stage(s), int64_t(s) * kBK);
    CommitCopies();
  }
  int compute_stage = 0, load_stage = kStages - 1;
  for (int64_t t = 0; t < tiles; ++t) {
    WaitCopies<kStages - 2>();
    // Tile t is visible to all, and every warp is done with tile t - 1,
    // whose stage the next load overwrites.
    __syncthreads();
    if (t + kStages - 1 < tiles) stager.Load(stage(load_stage), (t + kStages - 1) * kBK);
    CommitCopies();
    load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;

    const T* as = stage(compute_stage) + warp_row * kLdA;
    const T* bs = stage(compute_stage) + C::kAElements + warp_col;
    compute_stage = compute_stage + 1 == kStages ? 0 : compute_stage + 1;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[kFragsM];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) LoadShared(fa[i], as + i * 16 * kLdA + kk, kLdA);
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) LoadShared(fb[j], bs + kk * kLdB + j * 16, kLdB);
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
  for (int r = 0; r < rows; ++r) {
#pragma unroll
    for (int j = 0; j < kWarpN; j += 32) {
      if (j == 0 || col + j < n) out[r * n + j] = Narrow<Out>(cs[r * kLdC + lane + j]);
    }
  }
}

template <typename T, typename Out, typename C, bool kChunks>
cudaError_t LaunchConfig(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream) {
  auto* kernel = &WmmaMatMulKernel<T, Out, C, kChunks>;
  constexpr size_t kShared = C::kSharedBytes;
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
  const int64_t blocks = CeilDiv(m, kBM) * CeilDiv(n, C::kBN);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  kernel<<<unsigned(blocks), kThreads, kShared, stream>>>(a, b, c, m, n, k);
  return cudaGetLastError();
}

template <typename T, typename Out, typename C>
cudaError_t Launch(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const bool chunks = k % 8 == 0 && n % 8 == 0 && Aligned16(a) && Aligned16(b);
  return chunks ? LaunchConfig<T, Out, C, true>(a, b, c, m, n, k, stream)
                : LaunchConfig<T, Out, C, false>(a, b, c, m, n, k, stream);
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchWmmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                             cudaStream_t stream) {
  return Launch<T, Out, DefaultConfig>(a, b, c, m, n, k, stream);
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
                                   int64_t m, int64_t n, int64_t k, const WmmaConfig& config,
                                   cudaStream_t stream) {
  using T = __nv_bfloat16;
  const auto [bk, stages, min_blocks, warp_n] = config;
  if (bk == 32 && stages == 4 && min_blocks == 2 && warp_n == 32)
    return Launch<T, T, DefaultConfig>(a, b, c, m, n, k, stream);
  if (bk == 32 && stages == 4 && min_blocks == 1 && warp_n == 64)
    return Launch<T, T, Config<32, 4, 1, 64>>(a, b, c, m, n, k, stream);
  if (bk == 32 && stages == 3 && min_blocks == 2 && warp_n == 32)
    return Launch<T, T, Config<32, 3, 2, 32>>(a, b, c, m, n, k, stream);
  if (bk == 64 && stages == 3 && min_blocks == 1 && warp_n == 32)
    return Launch<T, T, Config<64, 3, 1, 32>>(a, b, c, m, n, k, stream);
  if (bk == 32 && stages == 3 && min_blocks == 1 && warp_n == 64)
    return Launch<T, T, Config<32, 3, 1, 64>>(a, b, c, m, n, k, stream);
  return cudaErrorInvalidValue;
}

LaunchResult WmmaMatMul(const LaunchArgs& args) {
  return ForHalfElementType(args, [](const auto& t) {
    return LaunchWmmaMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
