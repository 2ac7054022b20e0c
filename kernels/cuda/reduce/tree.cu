// The textbook shared-memory tree reductions. ALL and PER_ROW reduce
// contiguous segments (one segment, or one per row); PER_COLUMN puts threads
// across columns (x) and rows (y) so that every load is coalesced, and trees
// along y. FP16 and BF16 widen on load and combine in float; partials
// between passes are float, and the last pass rounds to the output type.
#include <algorithm>
#include <vector>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/reduce/half_vectors.cuh"
#include "cuda/reduce/reduce_common.cuh"
#include "cuda/reduce/reduce_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColX = 32;
constexpr int kColY = 16;

template <typename T, typename Out, Combine C, bool kSequential>
__global__ void __launch_bounds__(kThreads)
    SegmentTreeKernel(const T* __restrict__ in, Out* __restrict__ out, int64_t seg_len,
                      int64_t chunks, int64_t mean_count) {
  using A = Acc<T>;
  using R = Reducer<A, C>;
  __shared__ A s[kThreads];
  const int tid = threadIdx.x;
  const int64_t seg = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const T* base = in + seg * seg_len;
  A v;
  if (!kSequential) {
    const int64_t i = chunk * kThreads + tid;
    v = i < seg_len ? Widen(base[i]) : R::Identity();
  } else {
    // Two elements per thread, combined while loading.
    const int64_t i = chunk * 2 * kThreads + tid;
    v = i < seg_len ? Widen(base[i]) : R::Identity();
    if (i + kThreads < seg_len) v = R::Apply(v, Widen(base[i + kThreads]));
  }
  s[tid] = v;
  __syncthreads();
  if (!kSequential) {
    // Divergent: active threads are spread over every warp.
    for (int stride = 1; stride < kThreads; stride *= 2) {
      if (tid % (2 * stride) == 0) s[tid] = R::Apply(s[tid], s[tid + stride]);
      __syncthreads();
    }
  } else {
    // Sequential addressing: the active threads are the first ones.
    for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
      if (tid < stride) s[tid] = R::Apply(s[tid], s[tid + stride]);
      __syncthreads();
    }
  }
  if (tid == 0) out[blockIdx.x] = Narrow<Out>(Finish(s[0], mean_count));
}

template <typename T, typename Out, Combine C, bool kSequential>
__global__ void __launch_bounds__(kColX* kColY)
    ColumnTreeKernel(const T* __restrict__ in, Out* __restrict__ out, int64_t rows, int64_t cols,
                     int64_t col_blocks, int64_t mean_count) {
  using A = Acc<T>;
  using R = Reducer<A, C>;
  __shared__ A s[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row_block = blockIdx.x / col_blocks, col_block = blockIdx.x % col_blocks;
  const int64_t col = col_block * kColX + tx;
  const int64_t row = row_block * kColY * (kSequential ? 2 : 1) + ty;
  A v = R::Identity();
  if (col < cols) {
    if (row < rows) v = Widen(in[row * cols + col]);
    if (kSequential && row + kColY < rows) v = R::Apply(v, Widen(in[(row + kColY) * cols + col]));
  }
  s[ty][tx] = v;
  __syncthreads();
  if (!kSequential) {
    for (int stride = 1; stride < kColY; stride *= 2) {
      if (ty % (2 * stride) == 0) s[ty][tx] = R::Apply(s[ty][tx], s[ty + stride][tx]);
      __syncthreads();
    }
  } else {
    for (int stride = kColY / 2; stride > 0; stride >>= 1) {
      if (ty < stride) s[ty][tx] = R::Apply(s[ty][tx], s[ty + stride][tx]);
      __syncthreads();
    }
  }
  if (ty == 0 && col < cols) {
    out[row_block * cols + col] = Narrow<Out>(Finish(s[0][tx], mean_count));
  }
}

// The passes of one reduction: each turns `segments` x `len` values into
// `segments` x `next` partials until next == 1.
struct Pass {
  int64_t len, next;
};

struct Plan {
  bool columns = false;  // column tree over a rows x cols matrix
  int64_t segments = 1;  // segment tree: segments of `len` contiguous values
  int64_t mean_count = 0;
  std::vector<Pass> passes;
  size_t buffer_elems[2] = {0, 0};  // ping-pong partials
};

Plan MakePlan(const Problem& p, bool sequential) {
  Plan plan;
  int64_t len;
  const bool columns = p.reduce_axis == ReduceAxis::kPerColumn && p.n > 1;
  if (columns) {
    plan.columns = true;
    plan.segments = p.n;  // width of the partial matrices
    len = p.m;
    if (p.reduce_op == ReduceOp::kMean) plan.mean_count = p.m;
  } else if (p.reduce_axis == ReduceAxis::kPerRow && p.m > 1) {
    plan.segments = p.m;
    len = p.n;
    if (p.reduce_op == ReduceOp::kMean) plan.mean_count = p.n;
  } else {
    len = p.m * p.n;
    if (p.reduce_op == ReduceOp::kMean) plan.mean_count = len;
  }
  const int64_t per_block =
      columns ? kColY * (sequential ? 2 : 1) : kThreads * (sequential ? 2 : 1);
  do {
    const int64_t next = CeilDiv(len, per_block);
    plan.passes.push_back({len, next});
    len = next;
  } while (len > 1);
  for (size_t i = 0; i + 1 < plan.passes.size(); ++i) {
    size_t& slot = plan.buffer_elems[i % 2];
    slot = std::max(slot, size_t(plan.passes[i].next * plan.segments));
  }
  return plan;
}

// One pass: `src` (In) into `dst` (Dst).
template <typename In, typename Dst, Combine C, bool kSequential>
cudaError_t LaunchPass(const Plan& plan, const Pass& pass, const In* src, Dst* dst,
                       int64_t mean_count, cudaStream_t stream) {
  if (plan.columns) {
    const int64_t col_blocks = CeilDiv(plan.segments, kColX);
    const int64_t blocks = col_blocks * pass.next;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    ColumnTreeKernel<In, Dst, C, kSequential><<<unsigned(blocks), dim3(kColX, kColY), 0, stream>>>(
        src, dst, pass.len, plan.segments, col_blocks, mean_count);
  } else {
    const int64_t blocks = plan.segments * pass.next;
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    SegmentTreeKernel<In, Dst, C, kSequential>
        <<<unsigned(blocks), kThreads, 0, stream>>>(src, dst, pass.len, pass.next, mean_count);
  }
  return cudaGetLastError();
}

// The first pass reads T; later ones the Acc<T> partials; the last writes Out.
template <typename T, typename Out, Combine C, bool kSequential>
cudaError_t Run(const T* in, Out* out, const Plan& plan, void* workspace, cudaStream_t stream) {
  using A = Acc<T>;
  A* buffers[2] = {static_cast<A*>(workspace),
                   reinterpret_cast<A*>(static_cast<char*>(workspace) +
                                        AlignBytes(plan.buffer_elems[0] * sizeof(A)))};
  const size_t passes = plan.passes.size();
  if (passes == 1) {
    return LaunchPass<T, Out, C, kSequential>(plan, plan.passes[0], in, out, plan.mean_count,
                                              stream);
  }
  cudaError_t err =
      LaunchPass<T, A, C, kSequential>(plan, plan.passes[0], in, buffers[0], 0, stream);
  for (size_t i = 1; i + 1 < passes && err == cudaSuccess; ++i) {
    err = LaunchPass<A, A, C, kSequential>(plan, plan.passes[i], buffers[(i - 1) % 2],
                                           buffers[i % 2], 0, stream);
  }
  if (err != cudaSuccess) return err;
  return LaunchPass<A, Out, C, kSequential>(
      plan, plan.passes[passes - 1], buffers[(passes - 2) % 2], out, plan.mean_count, stream);
}

template <typename T, typename Out, bool kSequential>
cudaError_t Dispatch(const T* in, Out* out, const Plan& plan, Combine c, void* ws,
                     cudaStream_t stream) {
  switch (c) {
    case Combine::kSum: return Run<T, Out, Combine::kSum, kSequential>(in, out, plan, ws, stream);
    case Combine::kMin: return Run<T, Out, Combine::kMin, kSequential>(in, out, plan, ws, stream);
    case Combine::kMax: return Run<T, Out, Combine::kMax, kSequential>(in, out, plan, ws, stream);
  }
  return cudaErrorInvalidValue;
}

size_t PlanBytes(const Plan& plan, size_t elem) {
  if (plan.buffer_elems[0] == 0) return 0;
  return AlignBytes(plan.buffer_elems[0] * elem) + AlignBytes(plan.buffer_elems[1] * elem);
}

}  // namespace

size_t TreeReduceWorkspaceBytes(const Problem& p, bool sequential) {
  const int64_t partial_bytes = ElementSize(Describe(p.dtype).accumulator);
  return PlanBytes(MakePlan(p, sequential), size_t(partial_bytes));
}

template <typename T, typename Out>
cudaError_t LaunchTreeReduce(const T* in, Out* out, const Problem& p, bool sequential,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const Plan plan = MakePlan(p, sequential);
  if (workspace_bytes < PlanBytes(plan, sizeof(Acc<T>))) return cudaErrorInvalidValue;
  const Combine c = CombineOf(p.reduce_op);
  return sequential ? Dispatch<T, Out, true>(in, out, plan, c, workspace, stream)
                    : Dispatch<T, Out, false>(in, out, plan, c, workspace, stream);
}

#define GPUCOMPUTE_INSTANTIATE(T, Out)                                                       \
  template cudaError_t LaunchTreeReduce<T, Out>(const T*, Out*, const Problem&, bool, void*, \
                                                size_t, cudaStream_t);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_INSTANTIATE)
#undef GPUCOMPUTE_INSTANTIATE

namespace {

LaunchResult Tree(const LaunchArgs& args, bool sequential) {
  const auto launch = [&](const auto& t) {
    return LaunchTreeReduce(t.a, t.out, t.p, sequential, t.workspace, t.workspace_bytes, t.stream);
  };
  return ForAnyElementType(args, launch);
}

}  // namespace

LaunchResult InterleavedReduce(const LaunchArgs& args) { return Tree(args, false); }
size_t InterleavedReduceWorkspaceBytes(const Problem& p) {
  return TreeReduceWorkspaceBytes(p, false);
}

LaunchResult SequentialReduce(const LaunchArgs& args) { return Tree(args, true); }
size_t SequentialReduceWorkspaceBytes(const Problem& p) {
  return TreeReduceWorkspaceBytes(p, true);
}

}  // namespace gpucompute::kernels::cuda
