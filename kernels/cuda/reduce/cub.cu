// The library reference: cub::DeviceReduce over all elements,
// cub::DeviceSegmentedReduce with one segment per row. MEAN divides the sums
// afterwards. MIN and MAX go through Reduce with NaN-propagating operators
// and +/-inf as the initial value: CUB's own Min/Max compare with `<` (a NaN
// survives or not depending on its place in the tree) and start from
// numeric_limits<T>::max()/lowest(), which turns MIN of all +inf into
// FLT_MAX. FP16 and BF16 go in through an iterator that widens each value
// to float (CUB then reduces in float) and come out through one that
// divides (MEAN) and rounds once to the output type.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
#include "cuda/reduce/half_vectors.cuh"
#include "cuda/reduce/reduce_common.cuh"
#include "cuda/reduce/reduce_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

struct RowStart {
  int64_t cols;
  __host__ __device__ int64_t operator()(int64_t row) const { return row * cols; }
};

template <typename T>
__global__ void DivideKernel(T* values, int64_t count, int64_t divisor) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) values[i] = values[i] / T(divisor);
}

bool Segmented(const Problem& p) { return p.reduce_axis == ReduceAxis::kPerRow && p.m > 1; }
bool Columns(const Problem& p) { return p.reduce_axis == ReduceAxis::kPerColumn && p.n > 1; }

// Calls the CUB entry point for the problem's op; with temp == nullptr this
// only sizes the temporary storage.
template <typename T>
cudaError_t CallCub(void* temp, size_t& temp_bytes, const T* in, T* out, const Problem& p,
                    cudaStream_t stream) {
  const Combine c = CombineOf(p.reduce_op);
  if (Segmented(p)) {
    auto begin =
        thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowStart{p.n});
    auto end = begin + 1;
    switch (c) {
      case Combine::kSum:
        return cub::DeviceSegmentedReduce::Sum(temp, temp_bytes, in, out, p.m, begin, end, stream);
      case Combine::kMin:
        return cub::DeviceSegmentedReduce::Reduce(temp, temp_bytes, in, out, p.m, begin, end,
                                                  NanMinOp{}, T(INFINITY), stream);
      case Combine::kMax:
        return cub::DeviceSegmentedReduce::Reduce(temp, temp_bytes, in, out, p.m, begin, end,
                                                  NanMaxOp{}, T(-INFINITY), stream);
    }
  } else {
    const int64_t count = p.m * p.n;
    switch (c) {
      case Combine::kSum: return cub::DeviceReduce::Sum(temp, temp_bytes, in, out, count, stream);
      case Combine::kMin:
        return cub::DeviceReduce::Reduce(temp, temp_bytes, in, out, count, NanMinOp{}, T(INFINITY),
                                         stream);
      case Combine::kMax:
        return cub::DeviceReduce::Reduce(temp, temp_bytes, in, out, count, NanMaxOp{}, T(-INFINITY),
                                         stream);
    }
  }
  return cudaErrorInvalidValue;
}

struct WidenOp {
  template <typename T>
  __host__ __device__ __forceinline__ float operator()(T x) const {
    return Widen(x);
  }
};

// The float result as Out: divided by `divisor` (MEAN; 0: not) in float,
// then rounded once.
template <typename Out>
struct FinishOp {
  int64_t divisor;
  __host__ __device__ __forceinline__ Out operator()(float v) const {
    return Narrow<Out>(divisor > 0 ? v / float(divisor) : v);
  }
};

// Float-only operators: CUB works out its accumulator from the operator
// applied to the initial value and the iterator's element, so these must
// take a float whatever that element is.
struct FloatSumOp {
  __host__ __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct FloatNanMinOp {
  __host__ __device__ __forceinline__ float operator()(float a, float b) const {
    return NanMin(a, b);
  }
};
struct FloatNanMaxOp {
  __host__ __device__ __forceinline__ float operator()(float a, float b) const {
    return NanMax(a, b);
  }
};

// CallCub for the 16-bit types: float values in, Out through FinishOp.
template <typename T, typename Out>
cudaError_t CallCubHalf(void* temp, size_t& temp_bytes, const T* in, Out* out, const Problem& p,
                        cudaStream_t stream) {
  const Combine c = CombineOf(p.reduce_op);
  const bool mean = p.reduce_op == ReduceOp::kMean;
  auto values = thrust::make_transform_iterator(in, WidenOp{});
  if (Segmented(p)) {
    auto sink = thrust::make_transform_output_iterator(out, FinishOp<Out>{mean ? p.n : 0});
    auto begin =
        thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), RowStart{p.n});
    auto end = begin + 1;
    switch (c) {
      case Combine::kSum:
        return cub::DeviceSegmentedReduce::Reduce(temp, temp_bytes, values, sink, p.m, begin, end,
                                                  FloatSumOp{}, 0.0f, stream);
      case Combine::kMin:
        return cub::DeviceSegmentedReduce::Reduce(temp, temp_bytes, values, sink, p.m, begin, end,
                                                  FloatNanMinOp{}, float(INFINITY), stream);
      case Combine::kMax:
        return cub::DeviceSegmentedReduce::Reduce(temp, temp_bytes, values, sink, p.m, begin, end,
                                                  FloatNanMaxOp{}, float(-INFINITY), stream);
    }
  } else {
    const int64_t count = p.m * p.n;
    auto sink = thrust::make_transform_output_iterator(out, FinishOp<Out>{mean ? count : 0});
    switch (c) {
      case Combine::kSum:
        return cub::DeviceReduce::Reduce(temp, temp_bytes, values, sink, count, FloatSumOp{}, 0.0f,
                                         stream);
      case Combine::kMin:
        return cub::DeviceReduce::Reduce(temp, temp_bytes, values, sink, count, FloatNanMinOp{},
                                         float(INFINITY), stream);
      case Combine::kMax:
        return cub::DeviceReduce::Reduce(temp, temp_bytes, values, sink, count, FloatNanMaxOp{},
                                         float(-INFINITY), stream);
    }
  }
  return cudaErrorInvalidValue;
}

// The CUB call for T in and Out out, as its own (MEAN included) or the
// float/double one followed by DivideKernel.
template <typename T, typename Out>
cudaError_t Call(void* temp, size_t& temp_bytes, const T* in, Out* out, const Problem& p,
                 cudaStream_t stream) {
  if constexpr (std::is_same_v<Acc<T>, T>) {
    return CallCub<T>(temp, temp_bytes, in, out, p, stream);
  } else {
    return CallCubHalf<T, Out>(temp, temp_bytes, in, out, p, stream);
  }
}

template <typename T, typename Out>
size_t CubBytes(const Problem& p) {
  size_t bytes = 0;
  if (Call<T, Out>(nullptr, bytes, nullptr, nullptr, p, nullptr) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return bytes;
}

}  // namespace

size_t CubReduceWorkspaceBytes(const Problem& p) {
  if (Columns(p)) return WarpShuffleReduceWorkspaceBytes(p);
  const bool f32 = p.float32_output;
  switch (p.dtype) {
    case DType::kFloat32: return AlignBytes(CubBytes<float, float>(p));
    case DType::kFloat64: return AlignBytes(CubBytes<double, double>(p));
    case DType::kFloat16:
      return AlignBytes(f32 ? CubBytes<__half, float>(p) : CubBytes<__half, __half>(p));
    case DType::kBFloat16:
      return AlignBytes(f32 ? CubBytes<__nv_bfloat16, float>(p)
                            : CubBytes<__nv_bfloat16, __nv_bfloat16>(p));
  }
  return 0;
}

template <typename T, typename Out>
cudaError_t LaunchCubReduce(const T* in, Out* out, const Problem& p, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream) {
  if (Columns(p)) return LaunchWarpShuffleReduce(in, out, p, workspace, workspace_bytes, stream);
  if constexpr (!std::is_same_v<Acc<T>, T>) {
    size_t needed = 0;
    cudaError_t err = CallCubHalf(nullptr, needed, in, out, p, stream);
    if (err != cudaSuccess) return err;
    if (needed > workspace_bytes || workspace == nullptr) return cudaErrorInvalidValue;
    err = CallCubHalf(workspace, needed, in, out, p, stream);
    return err != cudaSuccess ? err : cudaGetLastError();
  } else {
    size_t needed = 0;
    cudaError_t err = CallCub<T>(nullptr, needed, in, out, p, stream);
    if (err != cudaSuccess) return err;
    if (needed > workspace_bytes || workspace == nullptr) return cudaErrorInvalidValue;
    err = CallCub<T>(workspace, needed, in, out, p, stream);
    if (err != cudaSuccess) return err;
    if (p.reduce_op == ReduceOp::kMean) {
      const int64_t outputs = Segmented(p) ? p.m : 1;
      const int64_t divisor = Segmented(p) ? p.n : p.m * p.n;
      DivideKernel<T><<<unsigned(CeilDiv(outputs, 256)), 256, 0, stream>>>(out, outputs, divisor);
    }
    return cudaGetLastError();
  }
}

#define GPUCOMPUTE_INSTANTIATE(T, Out)                                                        \
  template cudaError_t LaunchCubReduce<T, Out>(const T*, Out*, const Problem&, void*, size_t, \
                                               cudaStream_t);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_INSTANTIATE)
#undef GPUCOMPUTE_INSTANTIATE

LaunchResult CubReduce(const LaunchArgs& args) {
  const auto launch = [](const auto& t) {
    return LaunchCubReduce(t.a, t.out, t.p, t.workspace, t.workspace_bytes, t.stream);
  };
  return ForAnyElementType(args, launch);
}

}  // namespace gpucompute::kernels::cuda
