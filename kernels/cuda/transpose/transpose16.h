// Transposes of 2-byte elements (FP16 and BF16 as their bits, uint16_t: a
// transpose moves bits and never converts, so -0, infinities, subnormals and
// NaN payloads come out as they went in). Internal to this folder.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_util.h"
#include "cuda/transpose/transpose_kernels.h"

namespace gpucompute::kernels::cuda {

// 16 bytes of 2-byte elements: 8 per vector.
template <>
struct Vec16<uint16_t> {
  using Type = uint4;
  static constexpr int kWidth = 8;
};

// Whether the pair kernels can take the shape: even m and n (every 2x2 block
// whole) and 4-byte aligned buffers (every pair one 32-bit word).
inline bool PairsFit(const void* in, const void* out, int64_t m, int64_t n) {
  const auto misaligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3) != 0; };
  return m % 2 == 0 && n % 2 == 0 && !misaligned(in) && !misaligned(out);
}

// The tiled kinds (shared, shared_padded, shared_swizzled,
// shared_padded_wide) on 2x2 element blocks held as two 32-bit words; the
// shape must pass PairsFit.
cudaError_t LaunchPairTranspose(const uint16_t* in, uint16_t* out, int64_t m, int64_t n,
                                TransposeKind kind, cudaStream_t stream);

// One configuration of the pair kernel, for the bench's ablation: a tile of
// (64 * tiles_y) x (64 * tiles_x) elements, `rows` rows of 32 threads, `pad`
// words per tile row or an XOR swizzle. cudaErrorInvalidValue for a
// configuration not compiled in (see kPairConfigs in pair_transpose.cu).
cudaError_t LaunchPairTransposeConfig(const uint16_t* in, uint16_t* out, int64_t m, int64_t n,
                                      int tiles_x, int tiles_y, int rows, int pad, bool swizzle,
                                      cudaStream_t stream);

}  // namespace gpucompute::kernels::cuda
