// Tensor cores through the PTX instructions under WMMA: mma.sync m16n8k16
// (FP16 or BF16 in, FP32 accumulators, A row-major, B "col", i.e. k-major
// fragments) fed by ldmatrix.x4, which loads four 8x8 matrices of 16-bit
// elements from shared memory in one instruction and hands each thread
// exactly the elements its fragment needs (.trans for B, stored k x n).
// Unlike WMMA's opaque fragments the layout is known, so the warp tile is
// m16n8 tiles in plain registers and ldmatrix addresses are worked out once.
//
// k-tiles move global -> shared with cp.async in a multi-stage ring, and
// the fragments of the next k16 step load while the tensor cores work on
// the current one (double-buffered registers, across k-tiles too); the
// block tile walks a band of block rows for L2 reuse; outputs go through
// shared memory to coalesced, bounds-checked stores. Any m, n, k: staged
// tiles are zero-filled outside the matrices; cp.async's 16-byte chunks need
// k and n multiples of 8 and 16-byte aligned inputs, other shapes stage
// element by element.
//
// One kernel, two shared layouts (the Layout policy), so that the pair
// differs in nothing else:
//   - Padded: 16 bytes after every tile row, so the eight rows one ldmatrix
//     phase reads start on eight different 16-byte bank groups;
//   - Swizzled: rows unpadded, the 16-byte chunk index XORed with row bits,
//     which spreads the same eight rows over the eight groups with no
//     shared memory spent on padding.
// Both are free of bank conflicts (Nsight Compute counts none for either at
// 2048^3). What differs is cp.async's side: the padded A tile's 80-byte rows
// straddle 128-byte lines, and the same cp.async instructions took twice
// the shared-memory wavefronts (3.83M against 1.85M at 2048^3); the
// swizzled kernel ran 5% faster at 4096^3 and 18% at 8192^3 on an H200.
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

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Consecutive blocks walk down a band of this many block rows before moving
// right, so that the tiles of A and B they share are still in L2.
constexpr int64_t kGroupRows = 8;

// Block tile kBM x kBN, k-tiles kBK deep, kWarpsM x (8 / kWarpsM) warps,
// pipeline stages, and the blocks per multiprocessor the registers must
// allow.
template <int kBM_, int kBN_, int kBK_, int kWarpsM_, int kStages_, int kMinBlocks_>
struct Config {
  static constexpr int kBM = kBM_, kBN = kBN_, kBK = kBK_, kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kWarpsM = kWarpsM_, kWarpsN = kWarps / kWarpsM;
  static constexpr int kWarpM = kBM / kWarpsM, kWarpN = kBN / kWarpsN;
  static constexpr int kFragsM = kWarpM / 16, kFragsN = kWarpN / 8;  // m16n8 tiles
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0 && kBK % 16 == 0);
};
// 128x256 block tiles of 64x64 warp tiles (each k16 step: 8 ldmatrix.x4 for
// 32 mma.sync), 4 stages, one block per multiprocessor. An ablation on an
// H200 (BF16 4096^3, swizzled, timed beside cuBLAS at ~745 TFLOP/s): 415
// TFLOP/s, against 410 with 3 stages, 382 with 64-deep k-tiles and 304 with
// 128x128 tiles at two blocks per multiprocessor (register-limited, it
// spills); 256x128 tiles (4 x 2 warps) reached 446, the next to adopt once
// tested like this one.
using DefaultConfig = Config<128, 256, 32, 2, 4, 1>;

// A tile of kRows x kCols 16-bit elements, addressed by 16-byte chunks.
// Both layouts repeat every 8 rows: Offset(r + 8q, c) = Offset(r, c) +
// 8q * kRowBytes, which lets a thread work out its ldmatrix addresses for
// one 16-row band and step to the others by constants.
template <int kRows, int kCols>
struct PaddedTile {
  static constexpr int kRowBytes = (kCols + 8) * 2;
  static constexpr int kBytes = kRows * kRowBytes;
  __device__ __forceinline__ static unsigned Offset(int row, int chunk) {
    return unsigned(row * kRowBytes + chunk * 16);
  }
};

template <int kRows, int kCols>
struct SwizzledTile {
  static constexpr int kChunks = kCols / 8;  // 16-byte chunks a row
  static constexpr int kRowBytes = kCols * 2;
  static constexpr int kBytes = kRows * kRowBytes;
  static_assert(kChunks >= 2 && (kChunks & (kChunks - 1)) == 0);
  // Eight consecutive rows at one logical chunk land on eight different
  // 16-byte groups of the 128-byte bank line: rows of 8 or more chunks XOR
  // the chunk's low 3 bits with the row's; shorter rows share a line
  // (128 / kRowBytes rows a line), and the line index picks the XOR.
  __device__ __forceinline__ static unsigned Offset(int row, int chunk) {
    constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;
    constexpr int kMask = kChunks >= 8 ? 7 : kChunks - 1;
    return unsigned(row * kRowBytes + (chunk ^ ((row / kRowsPerLine) & kMask)) * 16);
  }
};

struct Padded {
  template <int kRows, int kCols>
  using Tile = PaddedTile<kRows, kCols>;
};
struct Swizzled {
  template <int kRows, int kCols>
  using Tile = SwizzledTile<kRows, kCols>;
};

// A pipeline stage: the A tile (kBM x kBK) then the B tile (kBK x kBN).
template <typename C, typename Layout>
struct Stage {
  using A = typename Layout::template Tile<C::kBM, C::kBK>;
  using B = typename Layout::template Tile<C::kBK, C::kBN>;
  static constexpr int kBytes = A::kBytes + B::kBytes;
  static_assert(A::kBytes % 128 == 0 && kBytes % 128 == 0);
};

// The epilogue stages one 16-row band of a warp tile as floats at a time;
// 8 floats of padding put the four rows a half-warp's 8-byte stores touch
// on distinct banks.
template <typename C>
constexpr int kLdC = C::kWarpN + 8;

template <typename C, typename Layout>
constexpr size_t SharedBytes() {
  return std::max(size_t(C::kStages) * Stage<C, Layout>::kBytes,
                  size_t(kWarps) * 16 * kLdC<C> * sizeof(float));
}

__device__ __forceinline__ void CopyAsync16(unsigned shared, const void* global, bool inside) {
  // A source size of 0 reads nothing and fills the 16 bytes with zeros.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global),
               "r"(inside ? 16 : 0));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Four 8x8 matrices; lanes 8i..8i+7 give the row addresses of matrix i,
// which arrives in r[i].
__device__ __forceinline__ void LoadMatrices(unsigned (&r)[4], unsigned at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}
// The same, each matrix transposed on the way.
__device__ __forceinline__ void LoadMatricesTransposed(unsigned (&r)[4], unsigned at) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

// d += a * b on one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void Mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                    unsigned b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Stages k-tiles of the block's A rows [row0, row0 + kBM) and B columns
// [col0, col0 + kBN) into a pipeline stage, zeros outside the matrices.
template <typename T, typename C, typename Layout, bool kChunks>
struct Stager;

// By 16-byte cp.async chunks of 8 elements: k and n are multiples of 8, so a
// chunk is wholly inside or wholly outside. A thread's chunks keep their
// column (A) or row (B) from tile to tile, so their sources, destinations
// and row or column checks are worked out once, and a tile adds only its k
// offset and the k check.
template <typename T, typename C, typename Layout>
struct Stager<T, C, Layout, true> {
  using S = Stage<C, Layout>;
  static constexpr int kAPerRow = C::kBK / 8, kBPerRow = C::kBN / 8;
  static constexpr int kA = C::kBM * kAPerRow / kThreads, kB = C::kBK * kBPerRow / kThreads;
  static constexpr int kARowStep = kThreads / kAPerRow, kBRowStep = kThreads / kBPerRow;
  static_assert(kA * kThreads == C::kBM * kAPerRow && kB * kThreads == C::kBK * kBPerRow);

  const T* a_src[kA];  // row start + column offset, k0 = 0
  bool a_row_inside[kA];
  unsigned a_dst[kA];  // byte offset in a stage
  int a_col;
  const T* b_src;  // the thread's first row of the tile, k0 = 0
  int b_row;
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
      a_dst[i] = S::A::Offset(r, tid % kAPerRow);
    }
    const int b_col = (tid % kBPerRow) * 8;
    b_col_inside = col0 + b_col < n;
    b_row = tid / kBPerRow;
    b_src = b + int64_t(b_row) * n + (b_col_inside ? col0 + b_col : 0);
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      b_dst[i] = S::A::kBytes + S::B::Offset(b_row + i * kBRowStep, tid % kBPerRow);
    }
  }

  __device__ __forceinline__ void Load(unsigned stage, int64_t k0) const {
    const bool a_k_inside = k0 + a_col < k;
#pragma unroll
    for (int i = 0; i < kA; ++i) {
      const bool inside = a_row_inside[i] && a_k_inside;
      CopyAsync16(stage + a_dst[i], inside ? a_src[i] + k0 : a, inside);
    }
    const T* b_at = b_src + k0 * n;
#pragma unroll
    for (int i = 0; i < kB; ++i) {
      const bool inside = b_col_inside && k0 + b_row + i * kBRowStep < k;
      CopyAsync16(stage + b_dst[i], inside ? b_at + int64_t(i) * kBRowStep * n : b, inside);
    }
  }
};

// Element by element through registers, each bounds-checked.
template <typename T, typename C, typename Layout>
struct Stager<T, C, Layout, false> {
  using S = Stage<C, Layout>;
  const T* a;
  const T* b;
  int64_t m, n, k, row0, col0;
  int tid;

  __device__ Stager(const T* a_, const T* b_, int64_t m_, int64_t n_, int64_t k_, int64_t row0_,
                    int64_t col0_, int tid_)
      : a(a_), b(b_), m(m_), n(n_), k(k_), row0(row0_), col0(col0_), tid(tid_) {}

  __device__ __forceinline__ static T* At(unsigned stage, unsigned offset, int c) {
    return reinterpret_cast<T*>(__cvta_shared_to_generic(stage + offset)) + c % 8;
  }

  __device__ __forceinline__ void Load(unsigned stage, int64_t k0) const {
    for (int e = tid; e < C::kBM * C::kBK; e += kThreads) {
      const int r = e / C::kBK, c = e % C::kBK;
      *At(stage, S::A::Offset(r, c / 8), c) =
          row0 + r < m && k0 + c < k ? a[(row0 + r) * k + k0 + c] : Zero<T>();
    }
    for (int e = tid; e < C::kBK * C::kBN; e += kThreads) {
      const int r = e / C::kBN, c = e % C::kBN;
      *At(stage, S::A::kBytes + S::B::Offset(r, c / 8), c) =
          k0 + r < k && col0 + c < n ? b[(k0 + r) * n + col0 + c] : Zero<T>();
    }
  }
};

template <typename Out>
__device__ __forceinline__ void StoreFour(Out* at, float4 v) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float4*>(at) = v;
  } else {
    struct alignas(8) Four {
      Out x, y, z, w;
    };
    *reinterpret_cast<Four*>(at) =
        Four{Narrow<Out>(v.x), Narrow<Out>(v.y), Narrow<Out>(v.z), Narrow<Out>(v.w)};
  }
}

template <typename T, typename Out, typename C, typename Layout, bool kChunks>
__global__ void __launch_bounds__(kThreads, C::kMinBlocks)
    MmaMatMulKernel(const T* __restrict__ a, const T* __restrict__ b, Out* __restrict__ c,
                    int64_t m, int64_t n, int64_t k, bool out_by_four) {
  using S = Stage<C, Layout>;
  constexpr int kBM = C::kBM, kBN = C::kBN, kBK = C::kBK, kStages = C::kStages;
  constexpr int kWarpM = C::kWarpM, kWarpN = C::kWarpN;
  constexpr int kFragsM = C::kFragsM, kFragsN = C::kFragsN;
  extern __shared__ __align__(128) unsigned char shared[];
  const unsigned stages = unsigned(__cvta_generic_to_shared(shared));

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
  const int lane = tid % 32;
  const int warp = tid / 32;
  const int warp_row = (warp / C::kWarpsN) * kWarpM;
  const int warp_col = (warp % C::kWarpsN) * kWarpN;

  // ldmatrix addresses in a stage. A: lane l gives row l % 16 of a 16-row
  // band and chunk l / 16 of a k16 step (matrices: rows 0-7 / 8-15 at
  // k 0-7, then at k 8-15, the a0..a3 registers of mma's A fragment).
  // B: lane l gives k-row l % 16 and n-chunk l / 16 of a 16-column pair of
  // n8 tiles (transposed: b0, b1 of the first tile, then of the second).
  unsigned a_lane[kBK / 16];
#pragma unroll
  for (int s = 0; s < kBK / 16; ++s) {
    a_lane[s] = warp_row * S::A::kRowBytes + S::A::Offset(lane % 16, 2 * s + lane / 16);
  }
  unsigned b_lane[kFragsN / 2];
#pragma unroll
  for (int j = 0; j < kFragsN / 2; ++j) {
    b_lane[j] = S::A::kBytes + S::B::Offset(lane % 16, (warp_col + 16 * j) / 8 + lane / 16);
  }

  float acc[kFragsM][kFragsN][4];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // One k16 step's fragments: A for the warp's kFragsM row bands, B for its
  // kFragsN / 2 column pairs.
  struct Fragments {
    unsigned a[kFragsM][4];
    unsigned b[kFragsN / 2][4];
  };
  auto load_fragments = [&](Fragments& f, unsigned base, int step) {
#pragma unroll
    for (int i = 0; i < kFragsM; ++i) {
      LoadMatrices(f.a[i], base + a_lane[step] + i * 16 * S::A::kRowBytes);
    }
#pragma unroll
    for (int j = 0; j < kFragsN / 2; ++j) {
      LoadMatricesTransposed(f.b[j], base + b_lane[j] + step * 16 * S::B::kRowBytes);
    }
  };
  auto multiply = [&](const Fragments& f) {
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        Mma<T>(acc[i][j], f.a[i], f.b[j / 2][2 * (j % 2)], f.b[j / 2][2 * (j % 2) + 1]);
      }
  };

  const Stager<T, C, Layout, kChunks> stager(a, b, m, n, k, row0, col0, tid);
  const int64_t tiles = CeilDivDevice(k, kBK);
  // Fill all stages but one; every tile commits a group (empty ones too), so
  // that "all but kStages - 2 groups done" always means "the next tile has
  // landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < tiles) stager.Load(stages + s * S::kBytes, int64_t(s) * kBK);
    CommitCopies();
  }
  WaitCopies<kStages - 2>();
  __syncthreads();

  // Software-pipelined: the fragments of the next k16 step (the next tile's
  // first at a tile's last step) load while the tensor cores work on this
  // step's, so that neither ldmatrix's latency nor the barrier leaves the
  // tensor cores idle.
  constexpr int kSteps = kBK / 16;
  static_assert(kSteps >= 2, "the next tile's load must follow every read of its stage");
  Fragments frags[2];
  load_fragments(frags[0], stages, 0);
  int compute_stage = 0, load_stage = kStages - 1;
  for (int64_t t = 0; t < tiles; ++t) {
    const unsigned base = stages + compute_stage * S::kBytes;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      if (s == kSteps - 1) {
        // Tile t + 1 is visible to all, and every warp has read its last
        // fragments of tile t.
        WaitCopies<kStages - 2>();
        __syncthreads();
        compute_stage = compute_stage + 1 == kStages ? 0 : compute_stage + 1;
        if (t + 1 < tiles)
          load_fragments(frags[(s + 1) % 2], stages + compute_stage * S::kBytes, 0);
      } else {
        load_fragments(frags[(s + 1) % 2], base, s + 1);
      }
      if (s == 0) {
        // Every warp passed tile t - 1's last barrier after its last read
        // of tile t - 1's stage, which this load overwrites.
        if (t + kStages - 1 < tiles) {
          stager.Load(stages + load_stage * S::kBytes, (t + kStages - 1) * kBK);
        }
        CommitCopies();
        load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;
      }
      multiply(frags[s % 2]);
    }
  }

  // The pipeline's shared memory becomes each warp's float staging, one
  // 16-row band at a time: an m16n8 tile's thread holds columns 2(l % 4)
  // and +1 of rows l / 4 and l / 4 + 8.
  WaitCopies<0>();
  __syncthreads();
  constexpr int ldc = kLdC<C>;
  float* cs = reinterpret_cast<float*>(shared) + warp * 16 * ldc;
  // Reading back, a row of the band is kWarpN / 4 lanes of four floats.
  constexpr int kLanesPerRow = kWarpN / 4, kRowsPerStep = 32 / kLanesPerRow;
  const int read_col = (lane % kLanesPerRow) * 4;
  const int64_t col = col0 + warp_col + read_col;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i) {
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) {
      float* at = cs + (lane / 4) * ldc + j * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(at) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(at + 8 * ldc) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
    __syncwarp();
    const int64_t band_row0 = row0 + warp_row + i * 16;
#pragma unroll
    for (int r = lane / kLanesPerRow; r < 16; r += kRowsPerStep) {
      const int64_t row = band_row0 + r;
      if (row < m && col < n) {
        const float4 v = *reinterpret_cast<const float4*>(cs + r * ldc + read_col);
        Out* out = c + row * n + col;
        if (out_by_four) {
          StoreFour(out, v);
        } else {
          const float e[4] = {v.x, v.y, v.z, v.w};
          for (int q = 0; q < 4 && col + q < n; ++q) out[q] = Narrow<Out>(e[q]);
        }
      }
    }
    __syncwarp();
  }
}

template <typename T, typename Out, typename C, typename Layout, bool kChunks>
cudaError_t LaunchConfig(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                         cudaStream_t stream) {
  auto* kernel = &MmaMatMulKernel<T, Out, C, Layout, kChunks>;
  constexpr size_t kShared = SharedBytes<C, Layout>();
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
  const int64_t blocks = CeilDiv(m, C::kBM) * CeilDiv(n, C::kBN);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  // Four outputs at once where every row starts on a multiple of four
  // elements of a 4-element-aligned output.
  const bool out_by_four = n % 4 == 0 && reinterpret_cast<uintptr_t>(c) % (4 * sizeof(Out)) == 0;
  kernel<<<unsigned(blocks), kThreads, kShared, stream>>>(a, b, c, m, n, k, out_by_four);
  return cudaGetLastError();
}

template <typename T, typename Out, typename C, typename Layout>
cudaError_t Launch(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const bool chunks = k % 8 == 0 && n % 8 == 0 && Aligned16(a) && Aligned16(b);
  return chunks ? LaunchConfig<T, Out, C, Layout, true>(a, b, c, m, n, k, stream)
                : LaunchConfig<T, Out, C, Layout, false>(a, b, c, m, n, k, stream);
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchMmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                            MmaLayout layout, cudaStream_t stream) {
  return layout == MmaLayout::kSwizzled
             ? Launch<T, Out, DefaultConfig, Swizzled>(a, b, c, m, n, k, stream)
             : Launch<T, Out, DefaultConfig, Padded>(a, b, c, m, n, k, stream);
}

#define GPUCOMPUTE_INSTANTIATE_MMA(T, Out)                                                 \
  template cudaError_t LaunchMmaMatMul<T, Out>(const T*, const T*, Out*, int64_t, int64_t, \
                                               int64_t, MmaLayout, cudaStream_t);
GPUCOMPUTE_INSTANTIATE_MMA(__half, __half)
GPUCOMPUTE_INSTANTIATE_MMA(__half, float)
GPUCOMPUTE_INSTANTIATE_MMA(__nv_bfloat16, __nv_bfloat16)
GPUCOMPUTE_INSTANTIATE_MMA(__nv_bfloat16, float)
#undef GPUCOMPUTE_INSTANTIATE_MMA

LaunchResult MmaPaddedMatMul(const LaunchArgs& args) {
  return ForHalfElementType(args, [](const auto& t) {
    return LaunchMmaMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, MmaLayout::kPadded, t.stream);
  });
}

LaunchResult MmaSwizzledMatMul(const LaunchArgs& args) {
  return ForHalfElementType(args, [](const auto& t) {
    return LaunchMmaMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, MmaLayout::kSwizzled, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
