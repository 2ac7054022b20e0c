// The library reference: cub::DeviceReduce over all elements,
// cub::DeviceSegmentedReduce with one segment per row. MEAN divides the sums
// afterwards. MIN and MAX go through Reduce with NaN-propagating operators
// and +/-inf as the initial value: CUB's own Min/Max compare with `<` (a NaN
// survives or not depending on its place in the tree) and start from
// numeric_limits<T>::max()/lowest(), which turns MIN of all +inf into
// FLT_MAX.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include "cuda/cuda_util.h"
#include "cuda/launcher.h"
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

template <typename T>
size_t CubBytes(const Problem& p) {
  size_t bytes = 0;
  if (CallCub<T>(nullptr, bytes, nullptr, nullptr, p, nullptr) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return bytes;
}

}  // namespace

size_t CubReduceWorkspaceBytes(const Problem& p) {
  if (Columns(p)) return WarpShuffleReduceWorkspaceBytes(p);
  return AlignBytes(p.dtype == DType::kFloat32 ? CubBytes<float>(p) : CubBytes<double>(p));
}

template <typename T>
cudaError_t LaunchCubReduce(const T* in, T* out, const Problem& p, void* workspace,
                            size_t workspace_bytes, cudaStream_t stream) {
  if (Columns(p)) return LaunchWarpShuffleReduce<T>(in, out, p, workspace, workspace_bytes, stream);
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

template cudaError_t LaunchCubReduce<float>(const float*, float*, const Problem&, void*, size_t,
                                            cudaStream_t);
template cudaError_t LaunchCubReduce<double>(const double*, double*, const Problem&, void*, size_t,
                                             cudaStream_t);

LaunchResult CubReduce(const LaunchArgs& args) {
  return ForElementType(args, [](const auto& t) {
    return LaunchCubReduce(t.a, t.out, t.p, t.workspace, t.workspace_bytes, t.stream);
  });
}

}  // namespace gpucompute::kernels::cuda
