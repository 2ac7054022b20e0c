// Host-side launchers of the reductions. `p` gives the shape (m x n input),
// the op and the axis; `out` holds OutputElements(p) values. Multi-pass
// launchers take their scratch from `workspace` (at least the matching
// *WorkspaceBytes(p) bytes) and never allocate. Results are deterministic:
// the combination order depends only on the shape and the device's
// multiprocessor count, and no float atomics are used.
//
// T is the input type: float, double, __half or __nv_bfloat16; Out the
// output's, T or (for the 16-bit types, Problem::float32_output) float. The
// 16-bit types accumulate in float, keep float partials in the workspace,
// and round once when the result is stored.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels::cuda {

// Textbook block trees: 256 threads combine in shared memory, one element per
// thread with a divergent interleaved tree, or two per thread (first combine
// during the load) with sequential addressing. Repeated until one value per
// output remains.
template <typename T, typename Out>
cudaError_t LaunchTreeReduce(const T* in, Out* out, const Problem& p, bool sequential,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream);
size_t TreeReduceWorkspaceBytes(const Problem& p, bool sequential);

// Grid-stride 16-byte loads with several loads in flight, warp shuffles, and a
// deterministic final pass over per-block partials (ALL, PER_COLUMN).
template <typename T, typename Out>
cudaError_t LaunchWarpShuffleReduce(const T* in, Out* out, const Problem& p, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream);
size_t WarpShuffleReduceWorkspaceBytes(const Problem& p);

// cub::DeviceReduce (ALL), cub::DeviceSegmentedReduce (PER_ROW); PER_COLUMN
// has no CUB equivalent that reads rows coalesced and uses the warp_shuffle
// column kernel.
template <typename T, typename Out>
cudaError_t LaunchCubReduce(const T* in, Out* out, const Problem& p, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream);
size_t CubReduceWorkspaceBytes(const Problem& p);

}  // namespace gpucompute::kernels::cuda
