// The CUDA ladders, one table per op in kernels/cuda/<op>/ladder.cc, and
// their registration (register_cuda.cc).
#pragma once

#include <span>

#include "absl/status/status.h"
#include "cuda/launcher.h"
#include "gpucompute/kernels/ladder.h"

namespace gpucompute::kernels::cuda {

using CudaLadderRow = LadderRow<CudaLaunch, CudaBatchLaunch>;

std::span<const CudaLadderRow> MatMulLadder();
std::span<const CudaLadderRow> TransposeLadder();
std::span<const CudaLadderRow> ReduceLadder();

// Registers `rows` in order; each launch's CUDA and cuBLAS errors become an
// absl::Status naming the variant.
absl::Status AddCudaLadder(Registry& registry, Op op, std::span<const CudaLadderRow> rows);

}  // namespace gpucompute::kernels::cuda
