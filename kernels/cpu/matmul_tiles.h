// The CPU backend's MatMul on register tiles, at the vector width of the
// core it runs on (wide_vectors.h: AVX2 and FMA where the core has them,
// SSE2 otherwise).
#pragma once

#include <cstdint>

#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::kernels::cpu {

// Output rows a tile computes: the unit ParallelFor splits c into.
inline constexpr int64_t kTileRows = 4;

// Rows [row_begin, row_end) of c = a b, each element summed in a float64
// accumulator held in a register (tiles of kTileRows rows by 8 or 4
// columns) and rounded once to the output's dtype. row_begin is a
// multiple of kTileRows.
void MatMulRows(const Problem& p, const Buffers& buf, int64_t row_begin, int64_t row_end);

// The two widths of tile, for tests and benchmarks to run each:
enum class TileWidth { kBaseline, kWide };
// Whether this core runs the wide tiles (AVX2 and FMA on x86-64).
bool WideTilesHere();
// MatMulRows with the tiles of `width` (kWide runs the baseline tiles on a
// core without wide vectors).
void MatMulRowsWith(TileWidth width, const Problem& p, const Buffers& buf, int64_t row_begin,
                    int64_t row_end);

}  // namespace gpucompute::kernels::cpu
