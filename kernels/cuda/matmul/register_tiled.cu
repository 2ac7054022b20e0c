// The fastest exact matmul here: a 128x128 block tile computed by 256
// threads, each holding an 8x8 register tile (as 2x2 groups of 4x4 so that
// every shared-memory read is a 16-byte broadcast-friendly access), warps
// tiled 64x32, k-tiles double-buffered in shared memory with the next tile
// prefetched into registers while the current one is computed. cp.async is
// not used: A must be transposed on its way to shared memory, which a direct
// global-to-shared copy cannot do; the register prefetch gives the same
// overlap.
#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kThreads = 256;
// The float configuration register_tiled uses: k-tiles of 16 halve the
// barriers, and no register cap (one block per multiprocessor, no spills)
// beat two capped blocks by 12-15% on an H200 (see the bench's ablation).
// Double needs about 230 registers for the same tile: one block, k-tiles of 8.
template <typename T>
constexpr int kDefaultBK = sizeof(T) == 4 ? 16 : 8;
template <typename T>
constexpr int kDefaultMinBlocks = 1;
// A is stored transposed (k-major). Padding its rows by 4 elements moves the
// two k-halves written by one warp onto different banks, and keeps 16-byte
// alignment for the vector reads.
constexpr int kPadA = 4;

// Four consecutive elements: one 16-byte access for float, two for double.
template <typename T>
struct Quad;

template <>
struct Quad<float> {
  __device__ static void Load(const float* p, float (&v)[4]) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
  __device__ static void Store(float* p, float v0, float v1, float v2, float v3) {
    *reinterpret_cast<float4*>(p) = make_float4(v0, v1, v2, v3);
  }
};

template <>
struct Quad<double> {
  __device__ static void Load(const double* p, double (&v)[4]) {
    const double2 x = reinterpret_cast<const double2*>(p)[0];
    const double2 y = reinterpret_cast<const double2*>(p)[1];
    v[0] = x.x, v[1] = x.y, v[2] = y.x, v[3] = y.y;
  }
  __device__ static void Store(double* p, double v0, double v1, double v2, double v3) {
    reinterpret_cast<double2*>(p)[0] = make_double2(v0, v1);
    reinterpret_cast<double2*>(p)[1] = make_double2(v2, v3);
  }
};

// kVec: k and n are multiples of 4 and the pointers 16-byte aligned, so that
// every group of four elements is either wholly inside the matrix or wholly
// outside and can move as 16-byte accesses. Otherwise each element is
// bounds-checked on its own.
// kBK: k-tile depth (8 or 16); kMinBlocks: blocks per multiprocessor the
// register budget must allow (2 caps float at 128 registers).
template <typename T, int kBK, bool kVec>
__device__ __forceinline__ void RegisterTiledBody(const T* __restrict__ a, const T* __restrict__ b,
                                                  T* __restrict__ c, int64_t m, int64_t n,
                                                  int64_t k) {
  __shared__ __align__(16) T as[2][kBK][kBM + kPadA];
  __shared__ __align__(16) T bs[2][kBK][kBN];

  const int tid = threadIdx.x;
  const int64_t block_row = int64_t(blockIdx.y) * kBM;
  const int64_t block_col = int64_t(blockIdx.x) * kBN;

  // Staging: per k-tile each thread moves kLoads groups of four consecutive k
  // of A rows and kLoads groups of four consecutive columns of B rows.
  constexpr int kLoads = kBK / 8;
  constexpr int kQuadsPerARow = kBK / 4;
  constexpr int kARowStep = kThreads / kQuadsPerARow;
  constexpr int kBRowStep = kThreads / 32;
  const int a_row = tid / kQuadsPerARow;
  const int a_col = (tid % kQuadsPerARow) * 4;
  const int b_row = tid / 32;
  const int b_col = (tid % 32) * 4;
  const T* a_ptr = a + (block_row + a_row) * k + a_col;
  const T* b_ptr = b + int64_t(b_row) * n + block_col + b_col;
  const int64_t b_cols_left = n - (block_col + b_col);

  // Compute: warps form a 2x4 grid of 64x32 warp tiles; in a warp, lanes form
  // 8x4 and each owns rows tm..tm+3, tm+32..tm+35 and columns tn..tn+3,
  // tn+16..tn+19, so a warp's shared reads hit 8 (A) and 4 (B) distinct
  // 16-byte words.
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int tm = (warp / 4) * 64 + (lane / 4) * 4;
  const int tn = (warp % 4) * 32 + (lane % 4) * 4;

  T acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = T(0);

  T ra[kLoads][4], rb[kLoads][4];
  // Running pointers: a_ptr advances along k, b_ptr down the rows.
  const int64_t b_step = int64_t(kBK) * n;
  const int64_t a_load_step = int64_t(kARowStep) * k;
  const int64_t b_load_step = int64_t(kBRowStep) * n;
  auto load_tile = [&](int64_t k0) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const bool a_ok = block_row + a_row + l * kARowStep < m;
      const int64_t ka = k0 + a_col;
      const int64_t kb = k0 + b_row + l * kBRowStep;
      const T* ap = a_ptr + l * a_load_step;
      const T* bp = b_ptr + l * b_load_step;
      if (kVec) {
        if (a_ok && ka < k) {
          Quad<T>::Load(ap, ra[l]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) ra[l][j] = T(0);
        }
        if (kb < k && b_cols_left > 0) {
          Quad<T>::Load(bp, rb[l]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) rb[l][j] = T(0);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          ra[l][j] = (a_ok && ka + j < k) ? ap[j] : T(0);
          rb[l][j] = (kb < k && j < b_cols_left) ? bp[j] : T(0);
        }
      }
    }
    a_ptr += kBK;
    b_ptr += b_step;
  };
  auto store_tile = [&](int buf) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
#pragma unroll
      for (int j = 0; j < 4; ++j) as[buf][a_col + j][a_row + l * kARowStep] = ra[l][j];
      Quad<T>::Store(&bs[buf][b_row + l * kBRowStep][b_col], rb[l][0], rb[l][1], rb[l][2],
                     rb[l][3]);
    }
  };

  const int64_t tiles = CeilDivDevice(k, kBK);
  load_tile(0);
  store_tile(0);
  __syncthreads();
  for (int64_t t = 0; t < tiles; ++t) {
    const int buf = int(t & 1);
    // The next tile's global loads are in flight during this tile's math.
    if (t + 1 < tiles) load_tile((t + 1) * kBK);
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      T fa[8], fb[8];
      Quad<T>::Load(&as[buf][kk][tm], *reinterpret_cast<T(*)[4]>(&fa[0]));
      Quad<T>::Load(&as[buf][kk][tm + 32], *reinterpret_cast<T(*)[4]>(&fa[4]));
      Quad<T>::Load(&bs[buf][kk][tn], *reinterpret_cast<T(*)[4]>(&fb[0]));
      Quad<T>::Load(&bs[buf][kk][tn + 16], *reinterpret_cast<T(*)[4]>(&fb[4]));
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = fma(fa[i], fb[j], acc[i][j]);
    }
    // The other buffer was last read before the previous barrier, so one
    // barrier per k-tile suffices.
    if (t + 1 < tiles) store_tile(buf ^ 1);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t row = block_row + tm + (i / 4) * 32 + (i % 4);
    if (row >= m) continue;
#pragma unroll
    for (int jh = 0; jh < 2; ++jh) {
      const int64_t col = block_col + tn + jh * 16;
      T* out = c + row * n + col;
      const T* v = &acc[i][jh * 4];
      if (kVec && col < n) {
        Quad<T>::Store(out, v[0], v[1], v[2], v[3]);
      } else if (!kVec) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (col + j < n) out[j] = v[j];
      }
    }
  }
}

template <typename T, int kBK, int kMinBlocks, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    RegisterTiledKernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c,
                        int64_t m, int64_t n, int64_t k) {
  RegisterTiledBody<T, kBK, kVec>(a, b, c, m, n, k);
}

// The members of a batch on grid.z: the same body on each one's buffers.
template <typename T, int kBK, int kMinBlocks, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    RegisterTiledBatchKernel(const __grid_constant__ LaunchMembers<T> members, int64_t m, int64_t n,
                             int64_t k) {
  const auto& x = members.at[blockIdx.z];
  RegisterTiledBody<T, kBK, kVec>(x.a, x.b, x.out, m, n, k);
}

// Whether a launch on these buffers moves groups of four as 16-byte accesses.
template <typename T>
bool Vectorized(const T* a, const T* b, const T* c, int64_t n, int64_t k) {
  return k % 4 == 0 && n % 4 == 0 && Aligned16(a) && Aligned16(b) && Aligned16(c);
}

template <typename T, int kBK, int kMinBlocks>
cudaError_t Launch(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
                   cudaStream_t stream) {
  if (CeilDiv(m, kBM) > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(unsigned(CeilDiv(n, kBN)), unsigned(CeilDiv(m, kBM)));
  if (Vectorized(a, b, c, n, k)) {
    RegisterTiledKernel<T, kBK, kMinBlocks, true><<<grid, kThreads, 0, stream>>>(a, b, c, m, n, k);
  } else {
    RegisterTiledKernel<T, kBK, kMinBlocks, false><<<grid, kThreads, 0, stream>>>(a, b, c, m, n, k);
  }
  return cudaGetLastError();
}

}  // namespace

template <typename T>
cudaError_t LaunchRegisterTiledMatMulConfig(const T* a, const T* b, T* c, int64_t m, int64_t n,
                                            int64_t k, int bk, int min_blocks,
                                            cudaStream_t stream) {
  if (bk == 8 && min_blocks == 1) return Launch<T, 8, 1>(a, b, c, m, n, k, stream);
  // Double spills with a cap of 128 registers, and a double k-tile of 16
  // would need more than 48 KB of static shared memory.
  if constexpr (sizeof(T) == 4) {
    if (bk == 8 && min_blocks == 2) return Launch<T, 8, 2>(a, b, c, m, n, k, stream);
    if (bk == 16 && min_blocks == 1) return Launch<T, 16, 1>(a, b, c, m, n, k, stream);
    if (bk == 16 && min_blocks == 2) return Launch<T, 16, 2>(a, b, c, m, n, k, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t LaunchRegisterTiledMatMul(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
                                      cudaStream_t stream) {
  return Launch<T, kDefaultBK<T>, kDefaultMinBlocks<T>>(a, b, c, m, n, k, stream);
}

template cudaError_t LaunchRegisterTiledMatMulConfig<float>(const float*, const float*, float*,
                                                            int64_t, int64_t, int64_t, int, int,
                                                            cudaStream_t);
template cudaError_t LaunchRegisterTiledMatMulConfig<double>(const double*, const double*, double*,
                                                             int64_t, int64_t, int64_t, int, int,
                                                             cudaStream_t);

template cudaError_t LaunchRegisterTiledMatMul<float>(const float*, const float*, float*, int64_t,
                                                      int64_t, int64_t, cudaStream_t);
template cudaError_t LaunchRegisterTiledMatMul<double>(const double*, const double*, double*,
                                                       int64_t, int64_t, int64_t, cudaStream_t);

namespace {

// register_tiled's configuration for T (LaunchRegisterTiledMatMul's) over
// the members on grid.z; every member must take the same path (16-byte
// accesses or not) as it would alone.
template <typename T>
cudaError_t LaunchRegisterTiledBatch(const LaunchMembers<T>& members, int count, int64_t m,
                                     int64_t n, int64_t k, cudaStream_t stream) {
  if (CeilDiv(m, kBM) > 65535) return cudaErrorInvalidConfiguration;
  const auto vectorized = [&](int i) {
    return Vectorized(members.at[i].a, members.at[i].b, members.at[i].out, n, k);
  };
  const bool vec = vectorized(0);
  for (int i = 1; i < count; ++i) {
    if (vectorized(i) != vec) return cudaErrorNotSupported;
  }
  constexpr int kBK = kDefaultBK<T>;
  constexpr int kMin = kDefaultMinBlocks<T>;
  const dim3 grid(unsigned(CeilDiv(n, kBN)), unsigned(CeilDiv(m, kBM)), unsigned(count));
  if (vec) {
    RegisterTiledBatchKernel<T, kBK, kMin, true><<<grid, kThreads, 0, stream>>>(members, m, n, k);
  } else {
    RegisterTiledBatchKernel<T, kBK, kMin, false><<<grid, kThreads, 0, stream>>>(members, m, n, k);
  }
  return cudaGetLastError();
}

}  // namespace

LaunchResult RegisterTiledMatMulBatch(const BatchLaunchArgs& args) {
  return ForElementType(args, [&](const auto& members) {
    return LaunchRegisterTiledBatch(members, args.count, args.p.m, args.p.n, args.p.k, args.stream);
  });
}

LaunchResult RegisterTiledMatMul(const LaunchArgs& args) {
  return ForElementType(args, [](const auto& t) {
    return LaunchRegisterTiledMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
