// Tiled transposes of 2-byte elements as 32-bit words. A thread reads the
// word (a, b) of row 2i and the word (c, d) of row 2i+1 at the same column,
// i.e. one 2x2 block, and __byte_perm gives the two words of the block's
// transpose: (a, c) for output row 2j and (b, d) for output row 2j+1. The
// tile then holds words only, one per bank, and the float kernels' bank
// arithmetic applies as it is: a column read of a 32x33-word plane hits 32
// banks, where 2-byte elements would share words and the bytes moved per
// instruction would halve. On an H200 at 16384^2 (the bench's ablation):
// 0.88 of memcpy for the padded 64x64 pair tile against 0.61 for a 32x33 or
// 32x34 tile of 2-byte elements.
#include "cuda/cuda_util.h"
#include "cuda/transpose/tile_grid.h"
#include "cuda/transpose/transpose16.h"

namespace gpucompute::kernels::cuda {
namespace {

// A tile of kH = 32 * kTY block rows (2 * kH input rows) by kW = 32 * kTX
// word columns (2 * kW input columns), held as two planes, one per output
// row of a block pair: plane p, row c is output row 2 * (word column c) + p.
// Plane rows are padded by kPad words, or (kSwizzle) word r of plane row c
// lives at r ^ (c % 32): either way a warp's 32 stores to one plane column
// and its 32 loads of one plane row each hit 32 different banks. With
// kPad = 0 and no swizzle the stores of a warp all hit one bank (the
// "shared" rung).
template <int kTX, int kTY, int kRows, int kPad, bool kSwizzle>
__global__ void __launch_bounds__(32 * kRows)
    PairTransposeKernel(const uint32_t* __restrict__ in, uint32_t* __restrict__ out,
                        int64_t block_rows, int64_t words, int64_t tiles_x) {
  constexpr int kH = 32 * kTY, kW = 32 * kTX;
  __shared__ uint32_t plane[2][kW][kH + kPad];
  const int64_t r0 = (blockIdx.x / tiles_x) * kH, c0 = (blockIdx.x % tiles_x) * kW;
  const int tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int r = ty; r < kH; r += kRows)
#pragma unroll
    for (int i = 0; i < kTX; ++i) {
      const int c = tx + 32 * i;
      if (r0 + r < block_rows && c0 + c < words) {
        const uint32_t* p = in + 2 * (r0 + r) * words + c0 + c;
        const uint32_t top = p[0], bottom = p[words];
        const int at = kSwizzle ? (r ^ tx) : r;
        plane[0][c][at] = __byte_perm(top, bottom, 0x5410);  // low halves: a, c
        plane[1][c][at] = __byte_perm(top, bottom, 0x7632);  // high halves: b, d
      }
    }
  __syncthreads();
  // Output rows 2 * (c0 + c) + p hold block_rows words; consecutive threads
  // write consecutive words.
#pragma unroll
  for (int c = ty; c < kW; c += kRows)
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int i = 0; i < kTY; ++i) {
        const int r = tx + 32 * i;
        if (c0 + c < words && r0 + r < block_rows) {
          out[(2 * (c0 + c) + p) * block_rows + r0 + r] =
              plane[p][c][kSwizzle ? (r ^ (c % 32)) : r];
        }
      }
}

template <int kTX, int kTY, int kRows, int kPad, bool kSwizzle>
cudaError_t LaunchPairs(const uint16_t* in, uint16_t* out, int64_t m, int64_t n,
                        cudaStream_t stream) {
  const int64_t block_rows = m / 2, words = n / 2;
  const TileGrid grid = GridOf(block_rows, words, 32 * kTY, 32 * kTX);
  if (!grid.fits()) return cudaErrorInvalidConfiguration;
  PairTransposeKernel<kTX, kTY, kRows, kPad, kSwizzle>
      <<<unsigned(grid.blocks), dim3(32, kRows), 0, stream>>>(reinterpret_cast<const uint32_t*>(in),
                                                              reinterpret_cast<uint32_t*>(out),
                                                              block_rows, words, grid.tiles_x);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchPairTranspose(const uint16_t* in, uint16_t* out, int64_t m, int64_t n,
                                TransposeKind kind, cudaStream_t stream) {
  if (!PairsFit(in, out, m, n)) return cudaErrorInvalidValue;
  switch (kind) {
    // 64x64 elements (32x32 words), 4 rows of threads: the float tiles' shape in words.
    case TransposeKind::kShared: return LaunchPairs<1, 1, 4, 0, false>(in, out, m, n, stream);
    case TransposeKind::kSharedPadded: return LaunchPairs<1, 1, 4, 1, false>(in, out, m, n, stream);
    case TransposeKind::kSharedSwizzled:
      return LaunchPairs<1, 1, 4, 0, true>(in, out, m, n, stream);
    // 128x128 elements: a warp reads and writes 256-byte runs, as the float wide
    // tile. 16 rows of threads: 0.939 of memcpy at 16384^2 on an H200 against
    // 0.927 with 8 (the bench's ablation; float prefers 8).
    case TransposeKind::kSharedPaddedWide:
      return LaunchPairs<2, 2, 16, 1, false>(in, out, m, n, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t LaunchPairTransposeConfig(const uint16_t* in, uint16_t* out, int64_t m, int64_t n,
                                      int tiles_x, int tiles_y, int rows, int pad, bool swizzle,
                                      cudaStream_t stream) {
  if (!PairsFit(in, out, m, n)) return cudaErrorInvalidValue;
  const auto is = [&](int tx, int ty, int r, int p, bool s) {
    return tiles_x == tx && tiles_y == ty && rows == r && pad == p && swizzle == s;
  };
  if (is(1, 1, 4, 0, false)) return LaunchPairs<1, 1, 4, 0, false>(in, out, m, n, stream);
  if (is(1, 1, 4, 1, false)) return LaunchPairs<1, 1, 4, 1, false>(in, out, m, n, stream);
  if (is(1, 1, 4, 0, true)) return LaunchPairs<1, 1, 4, 0, true>(in, out, m, n, stream);
  if (is(1, 1, 8, 1, false)) return LaunchPairs<1, 1, 8, 1, false>(in, out, m, n, stream);
  if (is(2, 1, 8, 1, false)) return LaunchPairs<2, 1, 8, 1, false>(in, out, m, n, stream);
  if (is(1, 2, 8, 1, false)) return LaunchPairs<1, 2, 8, 1, false>(in, out, m, n, stream);
  if (is(2, 2, 8, 1, false)) return LaunchPairs<2, 2, 8, 1, false>(in, out, m, n, stream);
  if (is(2, 2, 16, 1, false)) return LaunchPairs<2, 2, 16, 1, false>(in, out, m, n, stream);
  if (is(2, 2, 8, 0, true)) return LaunchPairs<2, 2, 8, 0, true>(in, out, m, n, stream);
  return cudaErrorInvalidValue;
}

}  // namespace gpucompute::kernels::cuda
