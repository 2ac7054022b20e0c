// The one-dimensional grid of a tiled transpose (tile index = row tile *
// column tiles + column tile), so that any shape fits the grid limits.
// Internal to this folder.
#pragma once

#include <cstdint>

#include "cuda/cuda_util.h"

namespace gpucompute::kernels::cuda {

// An m x n transpose in tiles of tile_rows x tile_cols; past INT32_MAX
// blocks it has no launch.
struct TileGrid {
  int64_t tiles_x;  // tiles across the input's row
  int64_t blocks;
  bool fits() const { return blocks <= INT32_MAX; }
};

inline TileGrid GridOf(int64_t m, int64_t n, int64_t tile_rows, int64_t tile_cols) {
  const int64_t tiles_x = CeilDiv(n, tile_cols);
  return {tiles_x, tiles_x * CeilDiv(m, tile_rows)};
}

}  // namespace gpucompute::kernels::cuda
