// Transpose kernels, from the naive one to a 16-byte tiled one. Grids are
// one-dimensional (tile index = row tile * column tiles + column tile) so that
// any shape fits the grid limits.
#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/transpose/transpose_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;  // naive: a 32x8 block moves a 32x32 tile, 4 elements per thread

template <typename T>
__global__ void NaiveTransposeKernel(const T* __restrict__ in, T* __restrict__ out, int64_t m,
                                     int64_t n, int64_t tiles_x) {
  const int64_t tile_row = blockIdx.x / tiles_x, tile_col = blockIdx.x % tiles_x;
  const int64_t col = tile_col * kTile + threadIdx.x;
#pragma unroll
  for (int j = 0; j < kTile; j += kBlockRows) {
    const int64_t row = tile_row * kTile + threadIdx.y + j;
    if (row < m && col < n) out[col * m + row] = in[row * n + col];
  }
}

// kPad: extra elements per tile row; kSwizzle: element (r, c) lives at
// [r][c ^ r], so a column read visits 32 different banks without padding.
// A 32 x kRows block moves one 32x32 tile, 32 / kRows elements per thread.
template <typename T, int kPad, bool kSwizzle, int kRows>
__global__ void __launch_bounds__(kTile* kRows)
    TiledTransposeKernel(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                         int64_t tiles_x) {
  __shared__ T tile[kTile][kTile + kPad];
  const int64_t tile_row = blockIdx.x / tiles_x, tile_col = blockIdx.x % tiles_x;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = tile_col * kTile + tx;
#pragma unroll
  for (int j = 0; j < kTile; j += kRows) {
    const int r = ty + j;
    const int64_t row = tile_row * kTile + r;
    if (row < m && col < n) tile[r][kSwizzle ? (tx ^ r) : tx] = in[row * n + col];
  }
  __syncthreads();
  // Output row = input column; consecutive threads write consecutive input rows.
  const int64_t out_col = tile_row * kTile + tx;
#pragma unroll
  for (int j = 0; j < kTile; j += kRows) {
    const int c = ty + j;
    const int64_t out_row = tile_col * kTile + c;
    if (out_row < n && out_col < m) out[out_row * m + out_col] = tile[tx][kSwizzle ? (c ^ tx) : c];
  }
}

// A padded tile of (32 * kTY) x (32 * kTX + 1): with kTX = 2 a warp's
// reads of one row cover 256 contiguous bytes over two instructions, with
// kTY = 2 its writes do. Row pitch 32 * kTX + 1 keeps column reads on 32
// distinct banks.
template <typename T, int kTX, int kTY, int kRows>
__global__ void __launch_bounds__(32 * kRows)
    WideTiledTransposeKernel(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                             int64_t tiles_x) {
  constexpr int kH = 32 * kTY, kW = 32 * kTX;
  __shared__ T tile[kH][kW + 1];
  const int64_t row0 = (blockIdx.x / tiles_x) * kH, col0 = (blockIdx.x % tiles_x) * kW;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int r = ty; r < kH; r += kRows)
#pragma unroll
    for (int i = 0; i < kTX; ++i) {
      const int c = tx + 32 * i;
      if (row0 + r < m && col0 + c < n) tile[r][c] = in[(row0 + r) * n + col0 + c];
    }
  __syncthreads();
#pragma unroll
  for (int oc = ty; oc < kW; oc += kRows)
#pragma unroll
    for (int i = 0; i < kTY; ++i) {
      const int orow = tx + 32 * i;
      if (col0 + oc < n && row0 + orow < m) out[(col0 + oc) * m + row0 + orow] = tile[orow][oc];
    }
}

template <typename T, int kTX, int kTY, int kRows>
cudaError_t LaunchWide(const T* in, T* out, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t tiles_x = CeilDiv(n, 32 * kTX);
  const int64_t blocks = tiles_x * CeilDiv(m, 32 * kTY);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  WideTiledTransposeKernel<T, kTX, kTY, kRows>
      <<<unsigned(blocks), dim3(32, kRows), 0, stream>>>(in, out, m, n, tiles_x);
  return cudaGetLastError();
}

// 16 bytes per global access: V elements (4 float, 2 double). A warp covers
// 32 columns of 4 (float) rows, reading whole 128-byte lines; with rows padded
// by one element the scalar shared stores and loads of a float warp hit 32
// distinct banks in both phases.
// Rows of threads in the 32-wide blocks of the tiled kernels: 4 (8 elements
// per thread) beat 8 and 2 on an H200 (see the bench's ablation).
constexpr int kDefaultRows = 4;

constexpr int kVecTile = 64;
constexpr int kVecThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kVecThreads)
    Tile64Vec16TransposeKernel(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                               int64_t tiles_x) {
  using V = typename Vec16<T>::Type;
  constexpr int W = Vec16<T>::kWidth;
  constexpr int kLanesPerRow = 32 / W;  // lanes covering 32 columns
  constexpr int kIters = kVecTile * kVecTile / W / kVecThreads;
  __shared__ T tile[kVecTile][kVecTile + 1];
  const int64_t row0 = (blockIdx.x / tiles_x) * kVecTile;
  const int64_t col0 = (blockIdx.x % tiles_x) * kVecTile;
  const int lane = threadIdx.x % 32;

  // Slot e of the tile: warp-instruction w = e / 32 covers W rows x 32 columns.
  auto slot = [&](int i, int& r, int& c) {
    const int w = (i * kVecThreads + int(threadIdx.x)) / 32;
    r = (w / 2) * W + lane / kLanesPerRow;
    c = (w % 2) * 32 + (lane % kLanesPerRow) * W;
  };

  V v[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    int r, c;
    slot(i, r, c);
    // n is a multiple of W, so a vector is wholly inside or wholly outside.
    if (row0 + r < m && col0 + c < n)
      v[i] = *reinterpret_cast<const V*>(in + (row0 + r) * n + col0 + c);
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    int r, c;
    slot(i, r, c);
    const T* e = reinterpret_cast<const T*>(&v[i]);
#pragma unroll
    for (int j = 0; j < W; ++j) tile[r][c + j] = e[j];
  }
  __syncthreads();
  // Output tile: rows are input columns col0.., columns are input rows row0..
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    int r, c;
    slot(i, r, c);
    if (col0 + r < n && row0 + c < m) {
      V o;
      T* e = reinterpret_cast<T*>(&o);
#pragma unroll
      for (int j = 0; j < W; ++j) e[j] = tile[c + j][r];
      *reinterpret_cast<V*>(out + (col0 + r) * m + row0 + c) = o;
    }
  }
}

template <typename T, int kPad, bool kSwizzle, int kRows = kDefaultRows>
cudaError_t LaunchTiled(const T* in, T* out, int64_t m, int64_t n, cudaStream_t stream) {
  const int64_t tiles_x = CeilDiv(n, kTile);
  const int64_t blocks = tiles_x * CeilDiv(m, kTile);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  TiledTransposeKernel<T, kPad, kSwizzle, kRows>
      <<<unsigned(blocks), dim3(kTile, kRows), 0, stream>>>(in, out, m, n, tiles_x);
  return cudaGetLastError();
}

template <typename T, int kRows>
cudaError_t LaunchTiledKind(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                            cudaStream_t stream) {
  switch (kind) {
    case TransposeKind::kShared: return LaunchTiled<T, 0, false, kRows>(in, out, m, n, stream);
    case TransposeKind::kSharedPadded:
      return LaunchTiled<T, 1, false, kRows>(in, out, m, n, stream);
    case TransposeKind::kSharedSwizzled:
      return LaunchTiled<T, 0, true, kRows>(in, out, m, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

template <typename T>
cudaError_t LaunchTranspose(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                            cudaStream_t stream) {
  switch (kind) {
    case TransposeKind::kNaive: {
      const int64_t tiles_x = CeilDiv(n, kTile);
      const int64_t blocks = tiles_x * CeilDiv(m, kTile);
      if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
      NaiveTransposeKernel<T>
          <<<unsigned(blocks), dim3(kTile, kBlockRows), 0, stream>>>(in, out, m, n, tiles_x);
      return cudaGetLastError();
    }
    case TransposeKind::kShared: return LaunchTiled<T, 0, false>(in, out, m, n, stream);
    case TransposeKind::kSharedPadded: return LaunchTiled<T, 1, false>(in, out, m, n, stream);
    case TransposeKind::kSharedSwizzled: return LaunchTiled<T, 0, true>(in, out, m, n, stream);
    case TransposeKind::kSharedPaddedWide: return LaunchWide<T, 2, 2, 8>(in, out, m, n, stream);
    case TransposeKind::kTile64Vec16: {
      constexpr int W = Vec16<T>::kWidth;
      // Shapes whose rows are not whole 16-byte vectors take the padded kernel.
      if (m % W != 0 || n % W != 0 || !Aligned16(in) || !Aligned16(out)) {
        return LaunchTiled<T, 1, false>(in, out, m, n, stream);
      }
      const int64_t tiles_x = CeilDiv(n, kVecTile);
      const int64_t blocks = tiles_x * CeilDiv(m, kVecTile);
      if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
      Tile64Vec16TransposeKernel<T>
          <<<unsigned(blocks), kVecThreads, 0, stream>>>(in, out, m, n, tiles_x);
      return cudaGetLastError();
    }
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t LaunchTransposeConfig(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                                  int block_rows, cudaStream_t stream) {
  switch (block_rows) {
    case 8: return LaunchTiledKind<T, 8>(in, out, m, n, kind, stream);
    case 4: return LaunchTiledKind<T, 4>(in, out, m, n, kind, stream);
    case 2: return LaunchTiledKind<T, 2>(in, out, m, n, kind, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t LaunchWideTransposeConfig(const T* in, T* out, int64_t m, int64_t n, int tiles_x,
                                      int tiles_y, int block_rows, cudaStream_t stream) {
  if (tiles_x == 2 && tiles_y == 1 && block_rows == 8)
    return LaunchWide<T, 2, 1, 8>(in, out, m, n, stream);
  if (tiles_x == 1 && tiles_y == 2 && block_rows == 8)
    return LaunchWide<T, 1, 2, 8>(in, out, m, n, stream);
  if (tiles_x == 2 && tiles_y == 2 && block_rows == 8)
    return LaunchWide<T, 2, 2, 8>(in, out, m, n, stream);
  if (tiles_x == 2 && tiles_y == 2 && block_rows == 16)
    return LaunchWide<T, 2, 2, 16>(in, out, m, n, stream);
  return cudaErrorInvalidValue;
}

template cudaError_t LaunchWideTransposeConfig<float>(const float*, float*, int64_t, int64_t, int,
                                                      int, int, cudaStream_t);

template cudaError_t LaunchTransposeConfig<float>(const float*, float*, int64_t, int64_t,
                                                  TransposeKind, int, cudaStream_t);
template cudaError_t LaunchTransposeConfig<double>(const double*, double*, int64_t, int64_t,
                                                   TransposeKind, int, cudaStream_t);

template cudaError_t LaunchTranspose<float>(const float*, float*, int64_t, int64_t, TransposeKind,
                                            cudaStream_t);
template cudaError_t LaunchTranspose<double>(const double*, double*, int64_t, int64_t,
                                             TransposeKind, cudaStream_t);

namespace {

LaunchResult Transpose(const LaunchArgs& args, TransposeKind kind) {
  return ForElementType(args, [&](const auto& t) {
    return LaunchTranspose(t.a, t.out, t.p.m, t.p.n, kind, t.stream);
  });
}

}  // namespace

LaunchResult NaiveTranspose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kNaive);
}
LaunchResult SharedTranspose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kShared);
}
LaunchResult SharedPaddedTranspose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kSharedPadded);
}
LaunchResult SharedSwizzledTranspose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kSharedSwizzled);
}
LaunchResult SharedPaddedVec16Transpose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kTile64Vec16);
}
LaunchResult SharedPaddedWideTranspose(const LaunchArgs& args) {
  return Transpose(args, TransposeKind::kSharedPaddedWide);
}

}  // namespace gpucompute::kernels::cuda
