// Transpose kernels, from the naive one to a 16-byte tiled one. Grids are
// one-dimensional (tile index = row tile * column tiles + column tile) so that
// any shape fits the grid limits. 2-byte elements (FP16, BF16) go through
// as uint16_t; their tiled kinds take the pair kernels (pair_transpose.cu)
// when the shape allows.
#include <iterator>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/transpose/tile_grid.h"
#include "cuda/transpose/transpose16.h"
#include "cuda/transpose/transpose_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kBlockRows = 8;  // naive: a 32x8 block moves a 32x32 tile, 4 elements per thread

// Padding of the padded tiles, in elements: a row pitch of an odd number of
// 4-byte words keeps a column read on 32 banks. One element does it for
// 4-byte elements; 33 2-byte elements are 16.5 words and 65 are 32.5, which
// puts some lanes of a column read on one bank (2-way), so 2-byte elements
// pad by two. (Either way one 2-byte element per access is slow: 0.61 of
// memcpy at 16384^2 on an H200 with 32x33 or 32x34, against 0.88 for the
// same tile as 2x2 blocks of words; see pair_transpose.cu.)
template <typename T>
constexpr int kPadded = sizeof(T) == 2 ? 2 : 1;

// Each kernel below is a tile: the work of block blockIdx.x, Run by
// TransposeKernel for one transpose or TransposeBatchKernel for the
// members of a batch (on grid.z), the same code either way.
template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    TransposeKernel(const typename Tile::Element* __restrict__ in,
                    typename Tile::Element* __restrict__ out, int64_t m, int64_t n,
                    int64_t tiles_x) {
  Tile::Run(in, out, m, n, tiles_x);
}

template <typename Tile>
__global__ void __launch_bounds__(Tile::kThreads)
    TransposeBatchKernel(const __grid_constant__ LaunchMembers<typename Tile::Element> members,
                         int64_t m, int64_t n, int64_t tiles_x) {
  const auto& x = members.at[blockIdx.z];
  Tile::Run(x.a, x.out, m, n, tiles_x);
}

template <typename T>
struct NaiveTile {
  using Element = T;
  static constexpr int kThreads = kTile * kBlockRows;
  __device__ static void Run(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                             int64_t tiles_x) {
    const int64_t tile_row = blockIdx.x / tiles_x, tile_col = blockIdx.x % tiles_x;
    const int64_t col = tile_col * kTile + threadIdx.x;
#pragma unroll
    for (int j = 0; j < kTile; j += kBlockRows) {
      const int64_t row = tile_row * kTile + threadIdx.y + j;
      if (row < m && col < n) out[col * m + row] = in[row * n + col];
    }
  }
};

// kPad: extra elements per tile row; kSwizzle: element (r, c) lives at
// [r][c ^ r], so a column read visits 32 different banks without padding.
// A 32 x kRows block moves one 32x32 tile, 32 / kRows elements per thread.
template <typename T, int kPad, bool kSwizzle, int kRows>
struct SharedTile {
  using Element = T;
  static constexpr int kThreads = kTile * kRows;
  __device__ static void Run(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
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
      if (out_row < n && out_col < m)
        out[out_row * m + out_col] = tile[tx][kSwizzle ? (c ^ tx) : c];
    }
  }
};

// A padded tile of (32 * kTY) x (32 * kTX + 1): with kTX = 2 a warp's
// reads of one row cover 256 contiguous bytes over two instructions, with
// kTY = 2 its writes do. Row pitch 32 * kTX + 1 keeps column reads on 32
// distinct banks.
template <typename T, int kTX, int kTY, int kRows, int kPad = kPadded<T>>
struct WideTile {
  using Element = T;
  static constexpr int kThreads = 32 * kRows;
  __device__ static void Run(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                             int64_t tiles_x) {
    constexpr int kH = 32 * kTY, kW = 32 * kTX;
    __shared__ T tile[kH][kW + kPad];
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
};

template <typename T, int kTX, int kTY, int kRows, int kPad = kPadded<T>>
cudaError_t LaunchWide(const T* in, T* out, int64_t m, int64_t n, cudaStream_t stream) {
  const TileGrid grid = GridOf(m, n, 32 * kTY, 32 * kTX);
  if (!grid.fits()) return cudaErrorInvalidConfiguration;
  TransposeKernel<WideTile<T, kTX, kTY, kRows, kPad>>
      <<<unsigned(grid.blocks), dim3(32, kRows), 0, stream>>>(in, out, m, n, grid.tiles_x);
  return cudaGetLastError();
}

// 16 bytes per global access: V elements (4 float, 2 double, 8 2-byte). A
// warp covers 32 columns of 4 (float) rows, reading whole 128-byte lines; with
// rows padded by one element the scalar shared stores and loads of a float
// warp hit 32 distinct banks in both phases. (2-byte elements: 8 rows of 64
// bytes per warp; with two elements of padding the loads are conflict-free
// and the stores 2-way, the best any padding gives this mapping.)
// Rows of threads in the 32-wide blocks of the tiled kernels: 4 (8 elements
// per thread) beat 8 and 2 on an H200 (see the bench's ablation).
constexpr int kDefaultRows = 4;

constexpr int kVecTile = 64;
constexpr int kVecThreads = 256;

template <typename T>
struct Vec16Tile {
  using Element = T;
  static constexpr int kThreads = kVecThreads;
  __device__ static void Run(const T* __restrict__ in, T* __restrict__ out, int64_t m, int64_t n,
                             int64_t tiles_x) {
    using V = typename Vec16<T>::Type;
    constexpr int W = Vec16<T>::kWidth;
    constexpr int kLanesPerRow = 32 / W;  // lanes covering 32 columns
    constexpr int kIters = kVecTile * kVecTile / W / kVecThreads;
    __shared__ T tile[kVecTile][kVecTile + kPadded<T>];
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
};

template <typename T, int kPad, bool kSwizzle, int kRows = kDefaultRows>
cudaError_t LaunchTiled(const T* in, T* out, int64_t m, int64_t n, cudaStream_t stream) {
  const TileGrid grid = GridOf(m, n, kTile, kTile);
  if (!grid.fits()) return cudaErrorInvalidConfiguration;
  TransposeKernel<SharedTile<T, kPad, kSwizzle, kRows>>
      <<<unsigned(grid.blocks), dim3(kTile, kRows), 0, stream>>>(in, out, m, n, grid.tiles_x);
  return cudaGetLastError();
}

template <typename T, int kRows>
cudaError_t LaunchTiledKind(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                            cudaStream_t stream) {
  switch (kind) {
    case TransposeKind::kShared: return LaunchTiled<T, 0, false, kRows>(in, out, m, n, stream);
    case TransposeKind::kSharedPadded:
      return LaunchTiled<T, kPadded<T>, false, kRows>(in, out, m, n, stream);
    case TransposeKind::kSharedSwizzled:
      return LaunchTiled<T, 0, true, kRows>(in, out, m, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

// The tile each kind runs, handed to `launch(tile, tile_rows, tile_cols,
// block)`: one mapping for a transpose alone and for a batch. `vectors`:
// whether the 16-byte kind may read and write whole vectors (rows of whole
// vectors, aligned pointers); where not, it runs the padded tile.
template <typename T, typename Launch>
cudaError_t WithTile(TransposeKind kind, bool vectors, const Launch& launch) {
  switch (kind) {
    case TransposeKind::kNaive:
      return launch(NaiveTile<T>{}, kTile, kTile, dim3(kTile, kBlockRows));
    case TransposeKind::kShared:
      return launch(SharedTile<T, 0, false, kDefaultRows>{}, kTile, kTile,
                    dim3(kTile, kDefaultRows));
    case TransposeKind::kSharedPadded:
      return launch(SharedTile<T, kPadded<T>, false, kDefaultRows>{}, kTile, kTile,
                    dim3(kTile, kDefaultRows));
    case TransposeKind::kSharedSwizzled:
      return launch(SharedTile<T, 0, true, kDefaultRows>{}, kTile, kTile,
                    dim3(kTile, kDefaultRows));
    case TransposeKind::kSharedPaddedWide:
      return launch(WideTile<T, 2, 2, 8>{}, 64, 64, dim3(32, 8));
    case TransposeKind::kTile64Vec16:
      if (!vectors) return WithTile<T>(TransposeKind::kSharedPadded, false, launch);
      return launch(Vec16Tile<T>{}, kVecTile, kVecTile, dim3(kVecThreads));
  }
  return cudaErrorInvalidValue;
}

// Whether an m x n shape's rows are whole 16-byte vectors.
template <typename T>
bool WholeVectors(int64_t m, int64_t n) {
  return m % Vec16<T>::kWidth == 0 && n % Vec16<T>::kWidth == 0;
}

}  // namespace

template <typename T>
cudaError_t LaunchTranspose(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                            cudaStream_t stream) {
  if constexpr (sizeof(T) == 2) {
    // 2x2 blocks as 32-bit words where every block is whole (pair_transpose.cu).
    const bool tiled = kind == TransposeKind::kShared || kind == TransposeKind::kSharedPadded ||
                       kind == TransposeKind::kSharedSwizzled ||
                       kind == TransposeKind::kSharedPaddedWide;
    if (tiled && PairsFit(in, out, m, n)) return LaunchPairTranspose(in, out, m, n, kind, stream);
  }
  const bool vectors = WholeVectors<T>(m, n) && Aligned16(in) && Aligned16(out);
  return WithTile<T>(
      kind, vectors, [&](auto tile, int64_t tile_rows, int64_t tile_cols, dim3 block) {
        const TileGrid grid = GridOf(m, n, tile_rows, tile_cols);
        if (!grid.fits()) return cudaErrorInvalidConfiguration;
        TransposeKernel<decltype(tile)>
            <<<unsigned(grid.blocks), block, 0, stream>>>(in, out, m, n, grid.tiles_x);
        return cudaGetLastError();
      });
}

namespace {

// LaunchTranspose's kernel for `kind` over the members of a batch (float and
// double: 2-byte elements take the pair kernels, which have no batched
// form), each member's tile run as it would be alone: members that would
// take different tiles alone (some aligned for 16-byte vectors, some not)
// have no one launch.
template <typename T>
cudaError_t LaunchTransposeBatch(const LaunchMembers<T>& members, int count, int64_t m, int64_t n,
                                 TransposeKind kind, cudaStream_t stream) {
  int aligned = 0;
  for (int i = 0; i < count; ++i) {
    aligned += Aligned16(members.at[i].a) && Aligned16(members.at[i].out) ? 1 : 0;
  }
  const bool whole = WholeVectors<T>(m, n);
  if (kind == TransposeKind::kTile64Vec16 && whole && aligned > 0 && aligned < count) {
    return cudaErrorNotSupported;
  }
  return WithTile<T>(kind, whole && aligned == count,
                     [&](auto tile, int64_t tile_rows, int64_t tile_cols, dim3 block) {
                       const TileGrid grid = GridOf(m, n, tile_rows, tile_cols);
                       if (!grid.fits()) return cudaErrorInvalidConfiguration;
                       TransposeBatchKernel<decltype(tile)>
                           <<<dim3(unsigned(grid.blocks), 1, unsigned(count)), block, 0, stream>>>(
                               members, m, n, grid.tiles_x);
                       return cudaGetLastError();
                     });
}

}  // namespace

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
template cudaError_t LaunchTranspose<uint16_t>(const uint16_t*, uint16_t*, int64_t, int64_t,
                                               TransposeKind, cudaStream_t);

namespace {

// The 2-byte ablation: one 2-byte element per shared access (scalar) against
// 2x2 blocks as words (pairs), each padding, the swizzle, and tile sizes
// (rows x columns of elements).
struct Ablation16 {
  const char* name;
  int tiles_x, tiles_y, rows, pad;  // pairs only
  bool swizzle;
};
constexpr Ablation16 kAblation16[] = {
    {"scalar 32x32", 0, 0, 0, 0, false},
    {"scalar 32x33", 0, 0, 0, 1, false},
    {"scalar 32x34", 0, 0, 0, 2, false},
    {"scalar 32x32 swizzled", 0, 0, 0, 0, true},
    {"scalar 64x65", 0, 0, 0, 1, false},
    {"scalar 64x66", 0, 0, 0, 2, false},
    {"pairs 64x64", 1, 1, 4, 0, false},
    {"pairs 64x64 padded", 1, 1, 4, 1, false},
    {"pairs 64x64 swizzled", 1, 1, 4, 0, true},
    {"pairs 64x64 padded rows8", 1, 1, 8, 1, false},
    {"pairs 64x128 padded", 2, 1, 8, 1, false},
    {"pairs 128x64 padded", 1, 2, 8, 1, false},
    {"pairs 128x128 padded", 2, 2, 8, 1, false},
    {"pairs 128x128 padded rows16", 2, 2, 16, 1, false},
    {"pairs 128x128 swizzled", 2, 2, 8, 0, true},
};

}  // namespace

const char* Transpose16AblationName(int index) {
  return index >= 0 && index < int(std::size(kAblation16)) ? kAblation16[index].name : nullptr;
}

cudaError_t LaunchTranspose16Ablation(int index, const uint16_t* in, uint16_t* out, int64_t m,
                                      int64_t n, cudaStream_t stream) {
  if (index < 0 || index >= int(std::size(kAblation16))) return cudaErrorInvalidValue;
  const Ablation16& a = kAblation16[index];
  switch (index) {
    case 0: return LaunchTiled<uint16_t, 0, false>(in, out, m, n, stream);
    case 1: return LaunchTiled<uint16_t, 1, false>(in, out, m, n, stream);
    case 2: return LaunchTiled<uint16_t, 2, false>(in, out, m, n, stream);
    case 3: return LaunchTiled<uint16_t, 0, true>(in, out, m, n, stream);
    case 4: return LaunchWide<uint16_t, 2, 2, 8, 1>(in, out, m, n, stream);
    case 5: return LaunchWide<uint16_t, 2, 2, 8, 2>(in, out, m, n, stream);
    default:
      return LaunchPairTransposeConfig(in, out, m, n, a.tiles_x, a.tiles_y, a.rows, a.pad,
                                       a.swizzle, stream);
  }
}

namespace {

LaunchResult Transpose(const LaunchArgs& args, TransposeKind kind) {
  if (IsHalfPrecision(args.p.dtype)) {
    const auto t = args.As<uint16_t>();  // bits only: FP16 and BF16 alike
    return LaunchTranspose(t.a, t.out, t.p.m, t.p.n, kind, t.stream);
  }
  return ForElementType(args, [&](const auto& t) {
    return LaunchTranspose(t.a, t.out, t.p.m, t.p.n, kind, t.stream);
  });
}

// The batched form of Transpose(args, kind): float and double, one launch.
LaunchResult TransposeBatch(const BatchLaunchArgs& args, TransposeKind kind) {
  return ForElementType(args, [&](const auto& members) {
    return LaunchTransposeBatch(members, args.count, args.p.m, args.p.n, kind, args.stream);
  });
}

}  // namespace

LaunchResult NaiveTransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kNaive);
}
LaunchResult SharedTransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kShared);
}
LaunchResult SharedPaddedTransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kSharedPadded);
}
LaunchResult SharedSwizzledTransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kSharedSwizzled);
}
LaunchResult SharedPaddedVec16TransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kTile64Vec16);
}
LaunchResult SharedPaddedWideTransposeBatch(const BatchLaunchArgs& args) {
  return TransposeBatch(args, TransposeKind::kSharedPaddedWide);
}

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
