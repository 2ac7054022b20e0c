// The Reduce ladder, simplest first: one row per variant. Each launcher is a
// `LaunchResult Name(const LaunchArgs&)` and each workspace function a
// `size_t Name(const Problem&)`, defined in this folder's kernel files. Every
// row takes every dtype; FP16 and BF16 accumulate in float and round once
// (cuda/accumulate.cuh).
#include "cuda/ladder.h"

namespace gpucompute::kernels::cuda {

// Not in an anonymous namespace: GPUCOMPUTE_KERNEL_FUNCTION declares the
// launchers in the namespace enclosing the table.
constexpr CudaLadderRow kReduceLadder[] = {
    {.name = "interleaved",
     .description = "shared-memory tree with interleaved (divergent) addressing, one element "
                    "per thread, repeated passes",
     .dtypes = kEveryDType,
     .workspace_bytes =
         GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, InterleavedReduceWorkspaceBytes),
     .zero_copy = true,
     .role = VariantRole::kTextbook,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, InterleavedReduce)},
    {.name = "sequential",
     .description = "shared-memory tree with sequential addressing, two elements per thread, "
                    "repeated passes",
     .dtypes = kEveryDType,
     .workspace_bytes =
         GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, SequentialReduceWorkspaceBytes),
     .zero_copy = true,
     .lesson = {.before = "interleaved",
                .idea = "divergence",
                .text = "sequential addressing keeps the active threads of a tree step in whole "
                        "warps (and adds two elements per thread on load)",
                .counter = "smsp__inst_executed.sum"},
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SequentialReduce)},
    {.name = "warp_shuffle",
     .description =
         "16-byte loads (8 values of 16 bits) with four in flight per thread, warp shuffles, "
         "deterministic final pass",
     .dtypes = kEveryDType,
     .fallback_rank = 2,
     .workspace_bytes =
         GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, WarpShuffleReduceWorkspaceBytes),
     .zero_copy = true,
     .role = VariantRole::kFlagship,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, WarpShuffleReduce),
     .launch_batch = GPUCOMPUTE_KERNEL_FUNCTION(CudaBatchLaunch, WarpShuffleReduceBatch)},
    {.name = "cub",
     .description = "cub::DeviceReduce (ALL), cub::DeviceSegmentedReduce (PER_ROW); PER_COLUMN "
                    "uses the coalesced warp_shuffle column kernel",
     .dtypes = kEveryDType,
     .fallback_rank = 1,
     .workspace_bytes = GPUCOMPUTE_KERNEL_FUNCTION(WorkspaceFunction, CubReduceWorkspaceBytes),
     .role = VariantRole::kVendorReference,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, CubReduce)},
};

std::span<const CudaLadderRow> ReduceLadder() { return kReduceLadder; }

}  // namespace gpucompute::kernels::cuda
