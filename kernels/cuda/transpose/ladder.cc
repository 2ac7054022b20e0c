// The Transpose ladder: one row per variant, in the order GetServerInfo and
// Profile list them. Each launcher is a `LaunchResult Name(const LaunchArgs&)`
// defined in this folder's kernel files. Every row takes every dtype: 2-byte
// elements move as their bits (the tiled rows as 2x2 blocks of 32-bit words,
// pair_transpose.cu).
#include "cuda/ladder.h"

namespace gpucompute::kernels::cuda {

// Not in an anonymous namespace: GPUCOMPUTE_KERNEL_FUNCTION declares the
// launchers in the namespace enclosing the table.
constexpr CudaLadderRow kTransposeLadder[] = {
    {.name = "naive",
     .description = "one element per thread: coalesced reads, strided writes",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .role = VariantRole::kTextbook,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, NaiveTranspose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, NaiveTransposeBatch)},
    {.name = "shared",
     .description = "32x32 shared-memory tile; column reads hit one bank (conflicts); 2-byte "
                    "elements as 2x2 blocks in 32-bit words",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .lesson = {.before = "naive",
                .idea = "coalescing",
                .text = "stage a tile in shared memory so the writes, not only the reads, are "
                        "coalesced",
                .counter = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedTranspose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, SharedTransposeBatch)},
    {.name = "shared_padded",
     .description = "32x33 padded shared-memory tile, conflict-free; 2-byte elements as 2x2 "
                    "blocks in 32-bit words",
     .dtypes = kEveryDType,
     .fallback_rank = 2,
     .zero_copy = true,
     .role = VariantRole::kFlagship,
     .lesson = {.before = "shared",
                .idea = "bank conflicts",
                .text = "pad the 32x32 tile to 32x33 so a column read hits 32 different banks",
                .counter = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedTranspose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, SharedPaddedTransposeBatch)},
    {.name = "shared_swizzled",
     .description = "32x32 shared-memory tile with XOR-swizzled columns, no padding; 2-byte "
                    "elements as 2x2 blocks in 32-bit words",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .lesson = {.before = "shared_padded",
                .idea = "swizzle vs padding",
                .text = "XOR-swizzle the columns instead of padding: conflict-free without the "
                        "extra column",
                .counter = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedSwizzledTranspose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, SharedSwizzledTransposeBatch)},
    {.name = "cublas",
     .description = "cublas<t>geam with op(A) = A^T; FP16 and BF16 through "
                    "cublasLtMatrixTransform",
     .dtypes = kEveryDType,
     .fallback_rank = 1,
     .role = VariantRole::kVendorReference,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, CublasTranspose)},
    {.name = "shared_padded_vec16",
     .description = "64x65 padded tile, 16-byte global loads and stores, conflict-free shared "
                    "access (shapes not divisible into 16-byte vectors use shared_padded; "
                    "2-byte elements: 64x66, stores 2-way)",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .lesson = {.before = "shared_padded_wide",
                .idea = "vector loads",
                .text = "16-byte global loads and stores: a quarter of the memory instructions "
                        "for the same tile",
                .counter = "smsp__inst_executed_op_global_ld.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedVec16Transpose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, SharedPaddedVec16TransposeBatch)},
    {.name = "shared_padded_wide",
     .description = "64x65 padded shared-memory tile, 16 elements per thread: each row is read "
                    "and written in 256-byte runs (2-byte elements: 128x128 as 2x2 blocks "
                    "in 64x65 words)",
     .dtypes = kEveryDType,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedWideTranspose),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, SharedPaddedWideTransposeBatch)},
};

std::span<const CudaLadderRow> TransposeLadder() { return kTransposeLadder; }

}  // namespace gpucompute::kernels::cuda
