// The MatMul ladder, simplest first: one row per variant. Each launcher is a
// `LaunchResult Name(const LaunchArgs&)` defined in this folder's kernel files.
#include "cuda/ladder.h"

namespace gpucompute::kernels::cuda {

// Not in an anonymous namespace: GPUCOMPUTE_KERNEL_FUNCTION declares the
// launchers in the namespace enclosing the table.
constexpr CudaLadderRow kMatMulLadder[] = {
    {.name = "naive",
     .description = "one thread per output element, A and B read from global memory",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .grid_y_rows = 8,  // naive.cu: 32 x 8 threads a block
     .role = VariantRole::kTextbook,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, NaiveMatMul),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, NaiveMatMulBatch)},
    {.name = "tiled16",
     .description = "16x16 shared-memory tiles of A and B, one output element per thread",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .grid_y_rows = 16,  // tiled.cu: tile x tile threads
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, TiledMatMul16),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, TiledMatMul16Batch)},
    {.name = "tiled32",
     .description = "32x32 shared-memory tiles of A and B, one output element per thread",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .grid_y_rows = 32,
     .lesson = {.before = "naive",
                .idea = "tiling",
                .text = "reuse 32x32 tiles of A and B from shared memory instead of reading global "
                        "memory per multiply-add",
                .counter = "smsp__inst_executed_op_global_ld.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, TiledMatMul32),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, TiledMatMul32Batch)},
    {.name = "tiled32_padded",
     .description = "32x33 padded shared-memory tiles, one output element per thread",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .grid_y_rows = 32,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, TiledMatMul32Padded),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, TiledMatMul32PaddedBatch)},
    {.name = "register_tiled",
     .description =
         "128x128 block tile, 8x8 register tile per thread, 64x32 warp tiles, 16-byte loads, "
         "transposed conflict-free A staging, double-buffered shared memory with register "
         "prefetch",
     .dtypes = kFloat32AndFloat64,
     .fallback_rank = 3,
     .zero_copy = true,
     .grid_y_rows = 128,  // a 128 x 128 block tile
     .role = VariantRole::kFlagship,
     .lesson = {.before = "tiled32",
                .idea = "register tiling",
                .text = "an 8x8 register tile per thread: each shared-memory load feeds 8 "
                        "multiply-adds (with 16-byte loads and double buffering)",
                .counter = "smsp__inst_executed_pipe_lsu.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, RegisterTiledMatMul),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, RegisterTiledMatMulBatch)},
    {.name = "wmma",
     .description = "tensor cores through WMMA: 128x128 block tile, 64x32 warp tiles of 16x16x16 "
                    "fragments, FP32 accumulators, 4-stage cp.async pipeline, padded shared memory",
     .dtypes = kHalfPrecision,
     .lesson = {.before = "tiled32",
                .idea = "tensor cores",
                .text = "16x16x16 matrix fragments on the tensor cores replace one scalar "
                        "multiply-add per thread and instruction",
                .counter = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                .counter_rises = true},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, WmmaMatMul)},
    {.name = "mma_padded",
     .description = "tensor cores through PTX mma.sync m16n8k16 fed by ldmatrix.x4: 128x256 block "
                    "tile, 64x64 warp tiles, FP32 accumulators, 4-stage cp.async pipeline, padded "
                    "shared memory",
     .dtypes = kHalfPrecision,
     .lesson = {.before = "wmma",
                .idea = "mma.sync + ldmatrix",
                .text = "the PTX under WMMA: m16n8k16 tiles in plain registers, each ldmatrix.x4 "
                        "loading four 8x8 fragments, and 64x64 warp tiles that feed more "
                        "multiply-adds per shared-memory load",
                .counter = "smsp__inst_executed_pipe_lsu.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, MmaPaddedMatMul)},
    {.name = "mma_swizzled",
     .description = "the mma_padded kernel with unpadded shared tiles whose 16-byte chunks are "
                    "XOR-swizzled by row: conflict-free ldmatrix, whole-line cp.async writes, no "
                    "padding",
     .dtypes = kHalfPrecision,
     .lesson = {.before = "mma_padded",
                .idea = "XOR swizzle",
                .text = "XOR each 16-byte chunk index with row bits instead of padding rows: "
                        "ldmatrix stays conflict-free, and rows aligned to 128 bytes let cp.async "
                        "fill shared memory in half the wavefronts, with no padding",
                .counter = "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, MmaSwizzledMatMul)},
    {.name = "wgmma",
     .description =
         "Hopper warpgroup MMA (m64n256k16 wgmma, sm_90a) fed by TMA with 128-byte swizzle: "
         "persistent 128x256 block tiles, 4-stage shared-memory ring with mbarriers, one producer "
         "and two consumer warpgroups (setmaxnreg), FP32 accumulators; WMMA where TMA cannot "
         "take the problem (n or k not a multiple of 8, misaligned pointers)",
     .dtypes = kHalfPrecision,
     .requires_sm90a = true,
     .lesson = {.before = "mma_swizzled",
                .idea = "warpgroup MMA + TMA",
                .text = "a warpgroup's asynchronous 64x256x16 MMAs read tiles that the TMA unit "
                        "copies into shared memory, one producer warpgroup keeping a 4-stage "
                        "ring full while two consumer warpgroups compute",
                .counter = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                .counter_rises = true},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, WgmmaMatMul)},
    {.name = "cublas",
     .description = "cuBLAS GEMM: FP32 without TF32, FP64 DGEMM, FP16/BF16 with FP32 accumulation",
     .dtypes = kEveryDType,
     .fallback_rank = 2,
     .workspace_bytes = GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, CublasMatMulWorkspaceBytes),
     .role = VariantRole::kVendorReference,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, CublasMatMul)},
    {.name = "cublas_tf32",
     .description = "cuBLAS GEMM on TF32 tensor cores (reduced precision)",
     .dtypes = kFloat32Only,
     .reduced_precision = true,
     .fallback_rank = 1,
     .workspace_bytes = GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, CublasMatMulWorkspaceBytes),
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, CublasTf32MatMul)},
};

std::span<const CudaLadderRow> MatMulLadder() { return kMatMulLadder; }

}  // namespace gpucompute::kernels::cuda
