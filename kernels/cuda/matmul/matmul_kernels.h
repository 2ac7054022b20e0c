// Host-side launchers of the matmul kernels (C = A * B, row-major, A m x k,
// B k x n). Each enqueues on `stream` and returns the launch error. Out is T,
// or float for 16-bit inputs whose result is asked for in float32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace gpucompute::kernels::cuda {

template <typename T, typename Out = T>
cudaError_t LaunchNaiveMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream);

// Shared-memory tiling with square tiles of `tile` (16 or 32) elements;
// `padded` adds one element to each tile row.
template <typename T, typename Out = T>
cudaError_t LaunchTiledMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              int tile, bool padded, cudaStream_t stream);

// 128x128 block tile, 8x8 register tile per thread, warp tiling, 16-byte
// loads and double-buffered shared memory.
template <typename T>
cudaError_t LaunchRegisterTiledMatMul(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
                                      cudaStream_t stream);

// The same kernel with a chosen k-tile depth (8 or 16) and minimum resident
// blocks per multiprocessor (1 or 2), for the benchmark's ablation.
template <typename T>
cudaError_t LaunchRegisterTiledMatMulConfig(const T* a, const T* b, T* c, int64_t m, int64_t n,
                                            int64_t k, int bk, int min_blocks, cudaStream_t stream);

// Tensor cores through nvcuda::wmma (T: __half or __nv_bfloat16): 128x128
// block tiles, 16x16x16 fragments accumulating in float, k-tiles staged in
// shared memory by a cp.async pipeline; any m, n, k.
template <typename T, typename Out = T>
cudaError_t LaunchWmmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                             cudaStream_t stream);

// Hopper warpgroup MMA (wgmma, sm_90a) fed by TMA (T: __half or
// __nv_bfloat16): a persistent kernel of 128x256 block tiles, a 4-stage
// shared-memory ring with mbarriers, one producer and two consumer
// warpgroups, FP32 accumulators; any m, n, k. Problems TMA cannot describe
// (n or k not a multiple of 8, misaligned pointers) and devices other than
// compute capability 9.0 run LaunchWmmaMatMul instead.
template <typename T, typename Out = T>
cudaError_t LaunchWgmmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                              cudaStream_t stream);

// The same kernel, BF16 in and out, in another configuration, for the
// benchmark's ablation and its tests: k-tile depth, pipeline stages, blocks
// per multiprocessor the registers must allow, warp tile width (32: 128x128
// block tiles, 64: 128x256).
struct WmmaConfig {
  int bk, stages, min_blocks, warp_n;
};
// What LaunchWmmaMatMulConfig takes (others: cudaErrorInvalidValue); the
// first is the ladder's.
inline constexpr WmmaConfig kWmmaConfigs[] = {
    {32, 4, 2, 32}, {32, 3, 2, 32}, {64, 3, 1, 32}, {32, 4, 1, 64}, {32, 3, 1, 64}};
cudaError_t LaunchWmmaMatMulConfig(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                                   int64_t m, int64_t n, int64_t k, const WmmaConfig& config,
                                   cudaStream_t stream);

// Tensor cores through PTX mma.sync m16n8k16 (T: __half or __nv_bfloat16)
// fed by ldmatrix from shared tiles in one of two layouts (same kernel, same
// tile shape otherwise): 128x256 block tiles of 64x64 warp tiles, FP32
// accumulators, a 4-stage cp.async pipeline; any m, n, k.
enum class MmaLayout {
  kPadded,    // 16 bytes of padding after each shared tile row
  kSwizzled,  // no padding; 16-byte chunks XOR-swizzled by row
};
template <typename T, typename Out = T>
cudaError_t LaunchMmaMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                            MmaLayout layout, cudaStream_t stream);

// cuBLAS GEMM on the caller's handle, bound to `stream` and to the caller's
// workspace. `tf32` allows TF32 tensor cores (float only); 16-bit inputs
// accumulate in float (CUBLAS_COMPUTE_32F) whatever the output. Returns a
// cudaError_t for CUDA failures; cuBLAS status codes come back through
// `cublas_status` (0 on success).
inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;
template <typename T, typename Out = T>
cudaError_t LaunchCublasMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                               bool tf32, void* cublas_handle, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream, int* cublas_status);

}  // namespace gpucompute::kernels::cuda
