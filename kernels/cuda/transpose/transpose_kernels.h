// Host-side launchers of the transpose kernels: out (n x m) = in (m x n)^T,
// row-major. Each enqueues on `stream` and returns the launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::kernels::cuda {

enum class TransposeKind {
  kNaive,             // one element per thread, coalesced reads, strided writes
  kShared,            // 32x32 tile, column reads hit one bank
  kSharedPadded,      // 32x33 tile
  kSharedSwizzled,    // 32x32 tile, column index XOR row
  kTile64Vec16,       // 64x64 padded tile, 16-byte global loads and stores
  kSharedPaddedWide,  // 64x65 padded tile, 16 elements per thread
};

// The ladder variant (transpose/ladder.cc) whose kernel `kind` is, for the
// benchmark's rows of the kernel's configurations.
constexpr const char* TransposeKindVariant(TransposeKind kind) {
  switch (kind) {
    case TransposeKind::kNaive: return "naive";
    case TransposeKind::kShared: return "shared";
    case TransposeKind::kSharedPadded: return "shared_padded";
    case TransposeKind::kSharedSwizzled: return "shared_swizzled";
    case TransposeKind::kTile64Vec16: return "shared_padded_vec16";
    case TransposeKind::kSharedPaddedWide: return "shared_padded_wide";
  }
  return "";
}

// T: float, double, or uint16_t for 2-byte elements (FP16 and BF16 bits).
template <typename T>
cudaError_t LaunchTranspose(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                            cudaStream_t stream);

// The 32x32 tiled kinds (shared, shared_padded, shared_swizzled) with 8, 4
// or 2 rows of threads per block, for the benchmark's ablation.
template <typename T>
cudaError_t LaunchTransposeConfig(const T* in, T* out, int64_t m, int64_t n, TransposeKind kind,
                                  int block_rows, cudaStream_t stream);

// Larger padded tiles, (32 * tiles_y) x (32 * tiles_x + 1), for the
// ablation (float; tiles 2x1, 1x2, 2x2 with 8 rows, 2x2 with 16 rows).
template <typename T>
cudaError_t LaunchWideTransposeConfig(const T* in, T* out, int64_t m, int64_t n, int tiles_x,
                                      int tiles_y, int block_rows, cudaStream_t stream);

// The 2-byte tiled kernels' configurations for the bench's ablation, by
// index from 0: a name ("pairs 64x64 padded", ...; null past the last) and a
// launcher (cudaErrorInvalidValue past the last, or for a shape a pairs
// configuration cannot take: odd m or n).
const char* Transpose16AblationName(int index);
cudaError_t LaunchTranspose16Ablation(int index, const uint16_t* in, uint16_t* out, int64_t m,
                                      int64_t n, cudaStream_t stream);

// cublas<t>geam with op(A) = A^T on the caller's handle bound to `stream`;
// cuBLAS status through `cublas_status`.
template <typename T>
cudaError_t LaunchCublasTranspose(const T* in, T* out, int64_t m, int64_t n, void* cublas_handle,
                                  cudaStream_t stream, int* cublas_status);

}  // namespace gpucompute::kernels::cuda
