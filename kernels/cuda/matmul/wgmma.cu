// Hopper tensor cores at full rate: warpgroup MMA (wgmma) fed by the Tensor
// Memory Accelerator (TMA), sm_90a only.
//
// A persistent kernel: one block per multiprocessor walks the 128x256 output
// tiles (banded for L2, as in wmma.cu). Each block is three warpgroups:
//   - a producer warpgroup, one thread of which issues TMA copies of 64-deep
//     k-tiles of A (128 x 64) and B (64 x 256) into a 4-stage shared-memory
//     ring; its registers go to the consumers (setmaxnreg);
//   - two consumer warpgroups, each computing a 64x256 half of the tile with
//     m64n256k16 wgmma from shared memory into 128 FP32 accumulators per
//     thread, rounded once to the output type.
// Each stage has two mbarriers: "full" (the producer's expected bytes, which
// the TMA copies complete) and "empty" (one arrival per consumer warp once
// its MMAs have read the stage). A consumer keeps one k-tile of MMAs in
// flight and frees a stage when the next tile's MMAs are issued.
//
// Shared-memory layouts, all with TMA's 128-byte swizzle (the swizzle the
// wgmma descriptors name): A is K-major (a row's 64 k-values are one
// 128-byte line); B is row-major k x n, i.e. MN-major for wgmma, staged as
// four 64-column boxes (a k-row's 64 n-values are one 128-byte line) and read
// with the instruction's B-transpose bit set, so B is never transposed in
// memory. Descriptor strides: A lines 8 rows apart are 1024 bytes apart; B's
// 8-k-row groups are 1024 bytes apart and its 64-column boxes 8192.
//
// Any m, n, k: TMA fills the parts of a box outside the matrices with zeros
// (which add nothing to the sums) and the output stores are bounds-checked.
// TMA needs 16-byte aligned matrices and row strides that are multiples of 16
// bytes, and coordinates that fit in 32 bits; other problems (n or k not a
// multiple of 8, misaligned pointers, k = 0) and other devices than compute
// capability 9.0 fall back to the WMMA kernel (LaunchWmmaMatMul) inside this
// variant.
//
// cuTensorMapEncodeTiled belongs to the driver API: it is looked up through
// the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
// The tensor maps hold the matrices' addresses, so every launch encodes its
// own (host-only, about a microsecond) and passes them as __grid_constant__
// kernel parameters.
//
// On an H200 (bench, cuBLAS GemmEx timed alternately in the same run):
// BF16 686 / 745 TFLOP/s at 4096^3 / 8192^3 (0.94 / 0.955 of cuBLAS), FP16
// 669 / 707 (0.93 / 0.94). A first try at clusters of two CTAs sharing the B
// tile by TMA multicast ran at 0.6 of cuBLAS and is not kept.
#include <cuda.h>
#include <cudaTypedefs.h>

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

constexpr int kBM = 128;
constexpr int kBN = 256;
constexpr int kBK = 64;  // 128 bytes of 16-bit values: one swizzled line
constexpr int kStages = 4;
constexpr int kConsumers = 2;  // warpgroups, 64 rows of the block tile each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kBoxN = 64;  // B columns a TMA box holds (one 128-byte line)
constexpr int kABytes = kBM * kBK * 2;
constexpr int kBBoxBytes = kBK * kBoxN * 2;
constexpr int kBBytes = kBK * kBN * 2;
constexpr int kStageBytes = kABytes + kBBytes;
// Swizzled tiles must start on 1024-byte boundaries; the dynamic shared
// memory is aligned by hand.
constexpr size_t kSharedBytes = size_t(kStages) * kStageBytes + 1024;
// Consecutive tiles walk down a band of this many tile rows before moving
// right: the ~132 tiles in flight then share A rows and B columns in L2.
constexpr int64_t kGroupRows = 16;
// Registers per thread after setmaxnreg: 128 * 40 + 256 * 232 <= 65536.
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;

// The 128 accumulator registers of one m64n256k16 wgmma, as the PTX operand
// list %0..%127 and as the asm operands bound to float d[128].
#define GPUCOMPUTE_WGMMA_D_LIST                                                              \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"  \
  "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45," \
  "%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67," \
  "%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89," \
  "%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,"    \
  "%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,"    \
  "%126,%127}"
#define GPUCOMPUTE_WGMMA_D_OPERANDS(d)                                                            \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void BarrierInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Waits until the phase of `bar` with parity `parity` has completed.
__device__ __forceinline__ void BarrierWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
}

__device__ __forceinline__ void BarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void BarrierExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One 2-D TMA box at (x: inner coordinate, y) into shared memory at `dst`,
// completing `bytes` of `bar`'s expected transaction.
__device__ __forceinline__ void TmaLoad(uint32_t dst, const CUtensorMap* map, int x, int y,
                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// A wgmma shared-memory matrix descriptor with 128-byte swizzle: start
// address, leading and stride byte offsets, each in 16-byte units.
__device__ __forceinline__ uint64_t Descriptor(uint32_t address, uint32_t leading,
                                               uint32_t stride) {
  return uint64_t((address & 0x3FFFF) >> 4) | uint64_t(leading >> 4) << 16 |
         uint64_t(stride >> 4) << 32 | uint64_t(1) << 62;
}

// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous MMAs' fences and waits.
__device__ __forceinline__ void FenceAccumulators(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d (+)= A * B for one 64 x 256 x 16 step: A K-major, B MN-major (transposed
// bit set), both from descriptors; `accumulate` 0 overwrites d.
template <typename T>
__device__ __forceinline__ void Wgmma(float (&d)[128], uint64_t a, uint64_t b,
                                      uint32_t accumulate) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " GPUCOMPUTE_WGMMA_D_LIST
        ", %128, %129, p, 1, 1, 0, 1;\n}\n"
        : GPUCOMPUTE_WGMMA_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " GPUCOMPUTE_WGMMA_D_LIST
        ", %128, %129, p, 1, 1, 0, 1;\n}\n"
        : GPUCOMPUTE_WGMMA_D_OPERANDS(d)
        : "l"(a), "l"(b), "r"(accumulate));
  }
}

template <typename Out>
__device__ __forceinline__ void StorePair(Out* p, float x, float y) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  } else if constexpr (std::is_same_v<Out, __half>) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
  } else {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
  }
}

// Tile `tile`'s first output row and column, banded for L2.
__device__ __forceinline__ void TileOrigin(int64_t tile, int64_t tiles_m, int64_t tiles_n,
                                           int64_t& row0, int64_t& col0) {
  const int64_t band = tile / (kGroupRows * tiles_n);
  const int64_t first = band * kGroupRows;
  const int64_t band_rows = min(tiles_m - first, kGroupRows);
  const int64_t in_band = tile % (kGroupRows * tiles_n);
  row0 = (first + in_band % band_rows) * kBM;
  col0 = (in_band / band_rows) * kBN;
}

// n is a multiple of 8 here (the TMA stride rule), so an output column pair
// (c, c + 1) with c even is wholly inside or wholly outside.
template <typename T, typename Out>
__global__ void __launch_bounds__(kThreads, 1)
    WgmmaMatMulKernel(const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, Out* __restrict__ c, int64_t m,
                      int64_t n, int64_t k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ __align__(8) uint64_t empty[kStages];
  extern __shared__ unsigned char dynamic_shared[];
  const uint32_t base = (SharedAddress(dynamic_shared) + 1023) & ~uint32_t(1023);

  const int64_t tiles_m = CeilDivDevice(m, kBM), tiles_n = CeilDivDevice(n, kBN);
  const int64_t tiles = tiles_m * tiles_n;
  const int k_tiles = int(CeilDivDevice(k, kBK));
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(SharedAddress(&full[s]), 1);
      BarrierInit(SharedAddress(&empty[s]), kConsumers * 4);
    }
    // Makes the initialized barriers visible to the TMA unit.
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (threadIdx.x != 0) return;
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&a_map) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&b_map) : "memory");
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      int64_t row0, col0;
      TileOrigin(tile, tiles_m, tiles_n, row0, col0);
      for (int kt = 0; kt < k_tiles; ++kt) {
        // A fresh barrier counts as having completed the phase before its
        // first, so the first pass over the ring does not wait.
        BarrierWait(SharedAddress(&empty[stage]), phase ^ 1);
        const uint32_t bar = SharedAddress(&full[stage]);
        BarrierExpectBytes(bar, kStageBytes);
        const uint32_t a_dst = base + stage * kStageBytes;
        TmaLoad(a_dst, &a_map, kt * kBK, int(row0), bar);
#pragma unroll
        for (int j = 0; j < kBN / kBoxN; ++j)
          TmaLoad(a_dst + kABytes + j * kBBoxBytes, &b_map, int(col0) + j * kBoxN, kt * kBK, bar);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int consumer = warpgroup - 1;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x % 128) / 32;
  float d[128];
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int64_t row0, col0;
    TileOrigin(tile, tiles_m, tiles_n, row0, col0);
    int previous = -1;
    for (int kt = 0; kt < k_tiles; ++kt) {
      BarrierWait(SharedAddress(&full[stage]), phase);
      const uint32_t a_tile = base + stage * kStageBytes + consumer * (64 * kBK * 2);
      const uint32_t b_tile = base + stage * kStageBytes + kABytes;
      FenceAccumulators(d);
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // A: the k-step is 32 bytes along the swizzled line; B: 16 k-rows of
        // 128 bytes.
        Wgmma<T>(d, Descriptor(a_tile + kk * 32, 16, 1024),
                 Descriptor(b_tile + kk * 16 * 128, kBBoxBytes, 1024), kt > 0 || kk > 0);
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      // The previous tile's MMAs are done: its stage goes back to the
      // producer while this tile's run.
      asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
      FenceAccumulators(d);
      if (previous >= 0 && lane == 0) BarrierArrive(SharedAddress(&empty[previous]));
      previous = stage;
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    FenceAccumulators(d);
    if (previous >= 0 && lane == 0) BarrierArrive(SharedAddress(&empty[previous]));

    // Accumulator layout of m64nNk16: thread (warp, lane) holds rows
    // warp * 16 + lane / 4 (+ 8) and, in each 8-column chunk j, columns
    // j * 8 + (lane % 4) * 2 (+ 1): d[4j], d[4j + 1] on the first row and
    // d[4j + 2], d[4j + 3] on the second.
    const int64_t row = row0 + consumer * 64 + warp * 16 + lane / 4;
    const int64_t col = col0 + (lane % 4) * 2;
    Out* out = c + row * n + col;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      if (col + j * 8 < n) {
        if (row < m) StorePair(out + j * 8, d[4 * j], d[4 * j + 1]);
        if (row + 8 < m) StorePair(out + 8 * n + j * 8, d[4 * j + 2], d[4 * j + 3]);
      }
    }
  }
#else
  __trap();  // compiled for sm_90a only; the launcher checks the device
#endif
}

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled, or null where the driver lacks it.
EncodeTiled EncodeFunction() {
  static const EncodeTiled encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return EncodeTiled(nullptr);
    return reinterpret_cast<EncodeTiled>(fn);
  }();
  return encode;
}

// A row-major rows x cols 16-bit matrix as a 2-D tensor map of box_rows x
// box_cols boxes with 128-byte swizzle; false if the driver refuses it.
template <typename T>
bool EncodeMatrix(EncodeTiled encode, CUtensorMap* map, const T* p, int64_t rows, int64_t cols,
                  uint32_t box_rows, uint32_t box_cols) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * sizeof(T)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type = std::is_same_v<T, __half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return encode(map, type, 2, const_cast<T*>(p), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchWgmmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  int device = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  int major = 0, minor = 0, multiprocessors = 0;
  if (cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      err != cudaSuccess)
    return err;
  if (cudaError_t err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
      err != cudaSuccess)
    return err;
  if (cudaError_t err =
          cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device);
      err != cudaSuccess)
    return err;
  constexpr int64_t kMaxCoordinate = int64_t(1) << 31;
  const bool tma = major == 9 && minor == 0 && k > 0 && k % 8 == 0 && n % 8 == 0 && Aligned16(a) &&
                   Aligned16(b) && reinterpret_cast<uintptr_t>(c) % (2 * sizeof(Out)) == 0 &&
                   m < kMaxCoordinate && n < kMaxCoordinate && k < kMaxCoordinate;
  EncodeTiled encode = tma ? EncodeFunction() : nullptr;
  CUtensorMap a_map, b_map;
  if (encode == nullptr || !EncodeMatrix(encode, &a_map, a, m, k, kBM, kBK) ||
      !EncodeMatrix(encode, &b_map, b, k, n, kBK, kBoxN)) {
    // Shapes, pointers or devices TMA and wgmma cannot take.
    return LaunchWmmaMatMul(a, b, c, m, n, k, stream);
  }

  auto* kernel = &WgmmaMatMulKernel<T, Out>;
  // Over 48 KB of dynamic shared memory must be opted into, per kernel and
  // per device: once for each device this process launches it on.
  static std::atomic<uint64_t> opted_in{0};
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if ((opted_in.load(std::memory_order_relaxed) & bit) == 0 || bit == 0) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSharedBytes));
    if (err != cudaSuccess) return err;
    opted_in.fetch_or(bit, std::memory_order_relaxed);
  }
  const int64_t tiles = CeilDiv(m, kBM) * CeilDiv(n, kBN);
  const unsigned blocks = unsigned(std::min<int64_t>(tiles, multiprocessors));
  kernel<<<blocks, kThreads, kSharedBytes, stream>>>(a_map, b_map, c, m, n, k);
  return cudaGetLastError();
}

template cudaError_t LaunchWgmmaMatMul<__half, __half>(const __half*, const __half*, __half*,
                                                       int64_t, int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchWgmmaMatMul<__half, float>(const __half*, const __half*, float*, int64_t,
                                                      int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchWgmmaMatMul<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*,
                                                                     const __nv_bfloat16*,
                                                                     __nv_bfloat16*, int64_t,
                                                                     int64_t, int64_t,
                                                                     cudaStream_t);
template cudaError_t LaunchWgmmaMatMul<__nv_bfloat16, float>(const __nv_bfloat16*,
                                                             const __nv_bfloat16*, float*, int64_t,
                                                             int64_t, int64_t, cudaStream_t);

LaunchResult WgmmaMatMul(const LaunchArgs& args) {
  return ForHalfElementType(args, [](const auto& t) {
    return LaunchWgmmaMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
