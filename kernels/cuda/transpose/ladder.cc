// The Transpose ladder: one row per variant, in the order GetServerInfo and
// Profile list them. Each launcher is a `LaunchResult Name(const LaunchArgs&)`
// defined in this folder's kernel files.
#include "cuda/ladder.h"

namespace gpucompute::kernels::cuda {

// Not in an anonymous namespace: GPUCOMPUTE_KERNEL_FUNCTION declares the
// launchers in the namespace enclosing the table.
constexpr CudaLadderRow kTransposeLadder[] = {
    {.name = "naive",
     .description = "one element per thread: coalesced reads, strided writes",
     .dtypes = kFloat32AndFloat64,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, NaiveTranspose)},
    {.name = "shared",
     .description = "32x32 shared-memory tile; column reads hit one bank (conflicts)",
     .dtypes = kFloat32AndFloat64,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedTranspose)},
    {.name = "shared_padded",
     .description = "32x33 padded shared-memory tile, conflict-free",
     .dtypes = kFloat32AndFloat64,
     .fallback_rank = 2,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedTranspose)},
    {.name = "shared_swizzled",
     .description = "32x32 shared-memory tile with XOR-swizzled columns, no padding",
     .dtypes = kFloat32AndFloat64,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedSwizzledTranspose)},
    {.name = "cublas",
     .description = "cublas<t>geam with op(A) = A^T",
     .dtypes = kFloat32AndFloat64,
     .fallback_rank = 1,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, CublasTranspose)},
    {.name = "shared_padded_vec16",
     .description = "64x65 padded tile, 16-byte global loads and stores, conflict-free shared "
                    "access (shapes not divisible into 16-byte vectors use shared_padded)",
     .dtypes = kFloat32AndFloat64,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedVec16Transpose)},
    {.name = "shared_padded_wide",
     .description = "64x65 padded shared-memory tile, 16 elements per thread: each row is read "
                    "and written in 256-byte runs",
     .dtypes = kFloat32AndFloat64,
     .zero_copy = true,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, SharedPaddedWideTranspose)},
};

std::span<const CudaLadderRow> TransposeLadder() { return kTransposeLadder; }

}  // namespace gpucompute::kernels::cuda
