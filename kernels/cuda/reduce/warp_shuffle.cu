// Bandwidth-bound reductions: 16-byte loads, four independent loads in flight
// per thread, warp shuffles, and partials combined by a second pass in a fixed
// order (never float atomics), so the same input gives the same bits. FP16
// and BF16 read 8 values a load and reduce in float (cuda/accumulate.cuh):
// partials between passes stay float, and only the stored result is rounded.
#include <algorithm>
#include <atomic>
#include <iterator>
#include <type_traits>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/reduce/half_vectors.cuh"
#include "cuda/reduce/reduce_common.cuh"
#include "cuda/reduce/reduce_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 2048 threads: a full multiprocessor
constexpr int kUnroll = 4;

template <typename T, Combine C, int W>
__device__ __forceinline__ void Accumulate(Acc<T> (&acc)[W], const typename Vec16<T>::Type& x) {
  const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
  for (int j = 0; j < W; ++j) acc[j] = Reducer<Acc<T>, C>::Apply(acc[j], Widen(e[j]));
}

// Reduces `count` contiguous values read with a stride of `stride` threads
// starting at `first`; kVec means `in` is 16-byte aligned. Returns this
// thread's partial.
template <typename T, Combine C, bool kVec>
__device__ __forceinline__ Acc<T> StridedPartial(const T* __restrict__ in, int64_t count,
                                                 int64_t first, int64_t stride) {
  using R = Reducer<Acc<T>, C>;
  using V = typename Vec16<T>::Type;
  constexpr int W = Vec16<T>::kWidth;
  Acc<T> acc[W];
#pragma unroll
  for (int j = 0; j < W; ++j) acc[j] = R::Identity();
  int64_t tail_start = 0;
  if (kVec) {
    const V* vin = reinterpret_cast<const V*>(in);
    const int64_t nvec = count / W;
    int64_t i = first;
    for (; i + (kUnroll - 1) * stride < nvec; i += kUnroll * stride) {
      V x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = vin[i + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) Accumulate<T, C, W>(acc, x[u]);
    }
    for (; i < nvec; i += stride) Accumulate<T, C, W>(acc, vin[i]);
    tail_start = nvec * W;
  }
  for (int64_t i = tail_start + first; i < count; i += stride)
    acc[0] = R::Apply(acc[0], Widen(in[i]));
  Acc<T> v = acc[0];
#pragma unroll
  for (int j = 1; j < W; ++j) v = R::Apply(v, acc[j]);
  return v;
}

// Each pass below is the work of one block, Run by PassKernel for one
// problem or by PassBatchKernel for each member of a batch (blockIdx.z),
// the same code either way, so a member's bits are those of its launch
// alone. `In` and `Result` are a pass's input and output element types.
// The shape travels as separate scalar parameters: packed in one struct,
// the column pass compiled to fewer registers, which changed its plan (the
// occupancy sets the chunks) and made it 1-8% slower.
template <typename Pass, typename... Args>
__global__ void __launch_bounds__(kThreads)
    PassKernel(const typename Pass::In* __restrict__ in, typename Pass::Result* __restrict__ out,
               Args... args) {
  Pass::Run(in, out, args...);
}

template <typename Pass, typename... Args>
__global__ void __launch_bounds__(kThreads) PassBatchKernel(
    const __grid_constant__ LaunchMembers<typename Pass::In, typename Pass::Result> members,
    Args... args) {
  const auto& x = members.at[blockIdx.z];
  Pass::Run(x.a, x.out, args...);
}

// ALL: a grid-stride pass writing one partial per block (or, with one block,
// the result). Out: Acc<T> for partials, the output type for the result.
template <typename T, typename Out, Combine C, bool kVec>
struct GridStridePass {
  using In = T;
  using Result = Out;
  __device__ __forceinline__ static void Run(const T* __restrict__ in, Out* __restrict__ out,
                                             int64_t count, int64_t mean_count) {
    using A = Acc<T>;
    __shared__ A scratch[kThreads / 32];
    const int64_t stride = int64_t(gridDim.x) * kThreads;
    const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    A v = StridedPartial<T, C, kVec>(in, count, first, stride);
    v = BlockReduce<A, C, kThreads>(v, scratch);
    if (threadIdx.x == 0) out[blockIdx.x] = Narrow<Out>(Finish(v, mean_count));
  }
};

// PER_ROW: a group of kGroup threads (a warp, or the whole block for few long
// rows) per row.
template <typename T, typename Out, Combine C, int kGroup, bool kVec>
struct RowPass {
  using In = T;
  using Result = Out;
  __device__ __forceinline__ static void Run(const T* __restrict__ in, Out* __restrict__ out,
                                             int64_t rows, int64_t cols, int64_t mean_count) {
    using A = Acc<T>;
    __shared__ A scratch[kThreads / 32];
    const int64_t row = int64_t(blockIdx.x) * (kThreads / kGroup) + threadIdx.x / kGroup;
    A v = Reducer<A, C>::Identity();
    if (row < rows)
      v = StridedPartial<T, C, kVec>(in + row * cols, cols, threadIdx.x % kGroup, kGroup);
    if (kGroup == 32) {
      v = WarpReduce<A, C>(v);
      if (threadIdx.x % 32 == 0 && row < rows) out[row] = Narrow<Out>(Finish(v, mean_count));
    } else {
      v = BlockReduce<A, C, kThreads>(v, scratch);
      if (threadIdx.x == 0 && row < rows) out[row] = Narrow<Out>(Finish(v, mean_count));
    }
  }
};

// PER_COLUMN: lanes across columns (W per lane, so a warp reads 32 * 16
// contiguous bytes of a row), warps across rows of one chunk of rows. Each
// block writes one partial row for its chunk; combining the 8 warps happens in
// shared memory in warp order.
template <typename T, typename Out, Combine C, bool kVec>
struct ColumnPass {
  using In = T;
  using Result = Out;
  __device__ __forceinline__ static void Run(const T* __restrict__ in, Out* __restrict__ out,
                                             int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                             int64_t col_blocks, int64_t mean_count) {
    using A = Acc<T>;
    using R = Reducer<A, C>;
    using V = typename Vec16<T>::Type;
    constexpr int W = kVec ? Vec16<T>::kWidth : 1;
    constexpr int kWarps = kThreads / 32;
    __shared__ __align__(16) A s[kWarps][32 * W];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t chunk = blockIdx.x / col_blocks, col_block = blockIdx.x % col_blocks;
    const int64_t col = col_block * 32 * W + lane * W;
    const int64_t r_begin = chunk * rows_per_chunk;
    const int64_t r_end = min(rows, r_begin + rows_per_chunk);
    A acc[W];
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] = R::Identity();
    if (col < cols) {
      const T* p = in + col;
      int64_t r = r_begin + warp;
      if (kVec) {
        for (; r + (kUnroll - 1) * kWarps < r_end; r += kUnroll * kWarps) {
          V x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u)
            x[u] = *reinterpret_cast<const V*>(p + (r + u * kWarps) * cols);
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) Accumulate<T, C, W>(acc, x[u]);
        }
        for (; r < r_end; r += kWarps)
          Accumulate<T, C, W>(acc, *reinterpret_cast<const V*>(p + r * cols));
      } else {
        for (; r + (kUnroll - 1) * kWarps < r_end; r += kUnroll * kWarps) {
          T x[kUnroll];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) x[u] = p[(r + u * kWarps) * cols];
#pragma unroll
          for (int u = 0; u < kUnroll; ++u) acc[0] = R::Apply(acc[0], Widen(x[u]));
        }
        for (; r < r_end; r += kWarps) acc[0] = R::Apply(acc[0], Widen(p[r * cols]));
      }
    }
#pragma unroll
    for (int j = 0; j < W; ++j) s[warp][lane * W + j] = acc[j];
    __syncthreads();
    for (int c = threadIdx.x; c < 32 * W; c += kThreads) {
      A v = s[0][c];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) v = R::Apply(v, s[w][c]);
      const int64_t out_col = col_block * 32 * W + c;
      if (out_col < cols) out[chunk * cols + out_col] = Narrow<Out>(Finish(v, mean_count));
    }
  }
};

template <typename T>
cudaError_t ColumnOccupancy(int* per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      per_sm,
      PassKernel<ColumnPass<T, Acc<T>, Combine::kSum, true>, int64_t, int64_t, int64_t, int64_t,
                 int64_t>,
      kThreads, 0);
}

// Resident ColumnPass blocks on the device (its register use, not the
// thread count, limits them), cached per element type.
int64_t ColumnSlots(DType dtype) {
  static std::atomic<int> cached[std::size(kAllDTypes)];
  const int index = static_cast<int>(dtype);
  int per_sm = cached[index].load(std::memory_order_relaxed);
  if (per_sm == 0) {
    cudaError_t err = cudaErrorInvalidValue;
    switch (dtype) {
      case DType::kFloat32: err = ColumnOccupancy<float>(&per_sm); break;
      case DType::kFloat64: err = ColumnOccupancy<double>(&per_sm); break;
      case DType::kFloat16: err = ColumnOccupancy<__half>(&per_sm); break;
      case DType::kBFloat16: err = ColumnOccupancy<__nv_bfloat16>(&per_sm); break;
    }
    if (err != cudaSuccess || per_sm <= 0) {
      cudaGetLastError();
      per_sm = 4;
    } else {
      cached[index].store(per_sm, std::memory_order_relaxed);
    }
  }
  return int64_t(DeviceSmCount()) * per_sm;
}

// How a problem is split. Everything here depends only on the shape and the
// multiprocessor count, which fixes the combination order.
struct Plan {
  enum Kind { kAll, kRows, kColumns } kind = kAll;
  int64_t count = 0;   // ALL: values reduced
  int64_t blocks = 1;  // ALL: first-pass blocks
  int64_t chunks = 1;  // PER_COLUMN: row chunks (partial rows)
  int64_t rows_per_chunk = 0;
  int64_t mean_count = 0;
  size_t workspace_elems = 0;
};

Plan MakePlan(const Problem& p) {
  Plan plan;
  const int64_t slots = int64_t(DeviceSmCount()) * kBlocksPerSm;
  const int64_t width = Vec16<float>::kWidth * 4 / ElementSize(p.dtype);  // elements per 16 bytes
  const bool mean = p.reduce_op == ReduceOp::kMean;
  if (p.reduce_axis == ReduceAxis::kPerRow && p.m > 1) {
    plan.kind = Plan::kRows;
    plan.mean_count = mean ? p.n : 0;
    return plan;
  }
  if (p.reduce_axis == ReduceAxis::kPerColumn && p.n > 1) {
    plan.kind = Plan::kColumns;
    const int64_t col_blocks = CeilDiv(p.n, 32 * width);
    // As many row chunks as fill the resident block slots once, each at least
    // 64 rows; a partial wave would leave most of the machine idle at the end.
    plan.chunks = std::max<int64_t>(1, std::min(ColumnSlots(p.dtype) / col_blocks, p.m / 64));
    plan.rows_per_chunk = CeilDiv(p.m, plan.chunks);
    plan.chunks = CeilDiv(p.m, plan.rows_per_chunk);
    plan.mean_count = mean ? p.m : 0;
    if (plan.chunks > 1) plan.workspace_elems = size_t(plan.chunks * p.n);
    return plan;
  }
  plan.kind = Plan::kAll;
  plan.count = p.m * p.n;
  plan.blocks = std::min(slots, CeilDiv(plan.count, int64_t(kThreads) * width * kUnroll));
  plan.mean_count = mean ? plan.count : 0;
  if (plan.blocks > 1) plan.workspace_elems = size_t(plan.blocks);
  return plan;
}

// Where a pass reads and writes: one problem's buffers (One), or each
// member's of a batch (Members), with the same pass code either way.
template <typename T, typename Out>
struct One {
  using In = T;
  using Result = Out;
  const T* in;
  Out* out;
  // Whether `in` may be read as 16-byte vectors.
  bool aligned() const { return Aligned16(in); }
  template <typename Pass, typename... Args>
  cudaError_t Launch(int64_t blocks, cudaStream_t stream, Args... args) const {
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    PassKernel<Pass><<<unsigned(blocks), kThreads, 0, stream>>>(in, out, args...);
    return cudaGetLastError();
  }
};

template <typename T, typename Out>
struct Members {
  using In = T;
  using Result = Out;
  const LaunchMembers<T, Out>& members;
  int count;
  // How many members may be read as 16-byte vectors, counted once.
  int aligned_count = CountAligned(members, count);
  static int CountAligned(const LaunchMembers<T, Out>& members, int count) {
    int aligned = 0;
    for (int i = 0; i < count; ++i) aligned += Aligned16(members.at[i].a) ? 1 : 0;
    return aligned;
  }
  // Every member aligned: the caller has made sure it is all or none.
  bool aligned() const { return aligned_count == count; }
  template <typename Pass, typename... Args>
  cudaError_t Launch(int64_t blocks, cudaStream_t stream, Args... args) const {
    if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
    PassBatchKernel<Pass>
        <<<dim3(unsigned(blocks), 1, unsigned(count)), kThreads, 0, stream>>>(members, args...);
    return cudaGetLastError();
  }
};

template <Combine C, typename Target>
cudaError_t LaunchAll(const Target& t, int64_t count, int64_t blocks, int64_t mean_count,
                      cudaStream_t stream) {
  using T = typename Target::In;
  using Out = typename Target::Result;
  if (t.aligned()) {
    return t.template Launch<GridStridePass<T, Out, C, true>>(blocks, stream, count, mean_count);
  }
  return t.template Launch<GridStridePass<T, Out, C, false>>(blocks, stream, count, mean_count);
}

template <Combine C, typename Target>
cudaError_t LaunchColumns(const Target& t, int64_t rows, int64_t cols, int64_t chunks,
                          int64_t rows_per_chunk, int64_t mean_count, cudaStream_t stream) {
  using T = typename Target::In;
  using Out = typename Target::Result;
  constexpr int W = Vec16<T>::kWidth;
  const bool vec = cols % W == 0 && t.aligned();
  const int64_t col_blocks = CeilDiv(cols, 32 * (vec ? W : 1));
  const int64_t blocks = col_blocks * chunks;
  if (vec) {
    return t.template Launch<ColumnPass<T, Out, C, true>>(blocks, stream, rows, cols,
                                                          rows_per_chunk, col_blocks, mean_count);
  }
  return t.template Launch<ColumnPass<T, Out, C, false>>(blocks, stream, rows, cols, rows_per_chunk,
                                                         col_blocks, mean_count);
}

template <Combine C, typename Target>
cudaError_t LaunchRows(const Target& t, int64_t rows, int64_t cols, int64_t mean_count,
                       cudaStream_t stream) {
  using T = typename Target::In;
  using Out = typename Target::Result;
  const bool vec = cols % Vec16<T>::kWidth == 0 && t.aligned();
  // A warp per row keeps long-lived warps; only when rows are too few to give
  // every multiprocessor eight warps does a whole block share a long row.
  const bool block_per_row = cols >= 1024 && rows < int64_t(DeviceSmCount()) * 8;
  if (block_per_row) {
    if (vec) {
      return t.template Launch<RowPass<T, Out, C, kThreads, true>>(rows, stream, rows, cols,
                                                                   mean_count);
    }
    return t.template Launch<RowPass<T, Out, C, kThreads, false>>(rows, stream, rows, cols,
                                                                  mean_count);
  }
  const int64_t blocks = CeilDiv(rows, kThreads / 32);
  if (vec) {
    return t.template Launch<RowPass<T, Out, C, 32, true>>(blocks, stream, rows, cols, mean_count);
  }
  return t.template Launch<RowPass<T, Out, C, 32, false>>(blocks, stream, rows, cols, mean_count);
}

// The plan's passes on `t`. Partials between the passes are Acc<T> (float
// for the 16-bit types), in `workspace`. A batch runs single-pass plans
// only: its members would each need a workspace.
template <Combine C, typename Target>
cudaError_t Run(const Target& t, const Problem& p, const Plan& plan, void* workspace,
                cudaStream_t stream) {
  using T = typename Target::In;
  using Out = typename Target::Result;
  using A = Acc<T>;
  switch (plan.kind) {
    case Plan::kRows: return LaunchRows<C>(t, p.m, p.n, plan.mean_count, stream);
    case Plan::kColumns:
      if (plan.chunks == 1) {
        return LaunchColumns<C>(t, p.m, p.n, 1, p.m, plan.mean_count, stream);
      }
      break;
    case Plan::kAll:
      if (plan.blocks == 1) return LaunchAll<C>(t, plan.count, 1, plan.mean_count, stream);
      break;
  }
  if constexpr (std::is_same_v<Target, Members<T, Out>>) {
    return cudaErrorNotSupported;
  } else {
    A* partials = static_cast<A*>(workspace);
    const One<T, A> first{t.in, partials};
    const One<A, Out> last{partials, t.out};
    if (plan.kind == Plan::kColumns) {
      cudaError_t err =
          LaunchColumns<C>(first, p.m, p.n, plan.chunks, plan.rows_per_chunk, 0, stream);
      if (err != cudaSuccess) return err;
      return LaunchColumns<C>(last, plan.chunks, p.n, 1, plan.chunks, plan.mean_count, stream);
    }
    if (plan.kind == Plan::kAll) {
      cudaError_t err = LaunchAll<C>(first, plan.count, plan.blocks, 0, stream);
      if (err != cudaSuccess) return err;
      return LaunchAll<C>(last, plan.blocks, 1, plan.mean_count, stream);
    }
    return cudaErrorInvalidValue;
  }
}

template <typename Target>
cudaError_t RunCombine(const Target& t, const Problem& p, const Plan& plan, void* workspace,
                       cudaStream_t stream) {
  switch (CombineOf(p.reduce_op)) {
    case Combine::kSum: return Run<Combine::kSum>(t, p, plan, workspace, stream);
    case Combine::kMin: return Run<Combine::kMin>(t, p, plan, workspace, stream);
    case Combine::kMax: return Run<Combine::kMax>(t, p, plan, workspace, stream);
  }
  return cudaErrorInvalidValue;
}

// The batched form: every member's single pass in one launch, each as it
// would run alone. Members that would differ alone (some read as 16-byte
// vectors, some not) and plans of two passes have no one launch.
template <typename T, typename Out>
cudaError_t LaunchWarpShuffleReduceBatch(const LaunchMembers<T, Out>& members, int count,
                                         const Problem& p, cudaStream_t stream) {
  const Members<T, Out> target{members, count};
  if (target.aligned_count != 0 && target.aligned_count != count) return cudaErrorNotSupported;
  const Plan plan = MakePlan(p);
  if (plan.workspace_elems > 0) return cudaErrorNotSupported;
  return RunCombine(target, p, plan, nullptr, stream);
}

}  // namespace

size_t WarpShuffleReduceWorkspaceBytes(const Problem& p) {
  const int64_t partial_bytes = ElementSize(Describe(p.dtype).accumulator);
  return AlignBytes(MakePlan(p).workspace_elems * size_t(partial_bytes));
}

template <typename T, typename Out>
cudaError_t LaunchWarpShuffleReduce(const T* in, Out* out, const Problem& p, void* workspace,
                                    size_t workspace_bytes, cudaStream_t stream) {
  const Plan plan = MakePlan(p);
  if (workspace_bytes < plan.workspace_elems * sizeof(Acc<T>)) return cudaErrorInvalidValue;
  return RunCombine(One<T, Out>{in, out}, p, plan, workspace, stream);
}

#define GPUCOMPUTE_INSTANTIATE(T, Out)                                                        \
  template cudaError_t LaunchWarpShuffleReduce<T, Out>(const T*, Out*, const Problem&, void*, \
                                                       size_t, cudaStream_t);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_INSTANTIATE)
#undef GPUCOMPUTE_INSTANTIATE

LaunchResult WarpShuffleReduce(const LaunchArgs& args) {
  const auto launch = [](const auto& t) {
    return LaunchWarpShuffleReduce(t.a, t.out, t.p, t.workspace, t.workspace_bytes, t.stream);
  };
  return ForAnyElementType(args, launch);
}

LaunchResult WarpShuffleReduceBatch(const BatchLaunchArgs& args) {
  const auto launch = [&](const auto& members) {
    return LaunchWarpShuffleReduceBatch(members, args.count, args.p, args.stream);
  };
  return ForAnyElementType(args, launch);
}

}  // namespace gpucompute::kernels::cuda
