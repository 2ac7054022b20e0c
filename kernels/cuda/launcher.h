// The one signature of a CUDA variant's launcher, CudaLaunch, so that a row of
// its op's ladder table can name it (GPUCOMPUTE_KERNEL_FUNCTION) without any
// header listing it. No abseil here: nvcc compiles the kernel files that
// define launchers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels::cuda {

// One launch with its buffers as T (device pointers); the output is Out:
// T, or float for a MatMul or Reduce of 16-bit inputs that asks for a
// float32 result (Problem::float32_output).
template <typename T, typename Out = T>
struct TypedLaunchArgs {
  const Problem& p;
  const T* a;
  const T* b;  // null for ops with one input
  Out* out;
  void* workspace;  // at least the variant's workspace_bytes(p) bytes
  size_t workspace_bytes;
  cudaStream_t stream;
  void* cublas;  // cublasHandle_t; launchers that use it bind it to `stream`
};

// One launch as the registry hands it over: buffers of the problem's dtype.
struct LaunchArgs {
  const Problem& p;
  const void* a;
  const void* b;
  void* out;
  void* workspace;
  size_t workspace_bytes;
  cudaStream_t stream;
  void* cublas;

  template <typename T, typename Out = T>
  TypedLaunchArgs<T, Out> As() const {
    return {p,
            static_cast<const T*>(a),
            static_cast<const T*>(b),
            static_cast<Out*>(out),
            workspace,
            workspace_bytes,
            stream,
            cublas};
  }
};

// What a launch reports: the launch's CUDA error and, from launchers that
// call cuBLAS, the cuBLAS status (0: success).
struct LaunchResult {
  // Implicit, so that a launcher can return its kernel's cudaError_t.
  LaunchResult(cudaError_t cuda_error = cudaSuccess, int cublas_status = 0)
      : cuda(cuda_error), cublas(cublas_status) {}
  cudaError_t cuda;
  int cublas;
};

// Enqueues the variant's work on args.stream and returns without waiting.
using CudaLaunch = LaunchResult(const LaunchArgs&);

// The most members one batched launch takes: their pointers travel in the
// kernel's parameters (24 bytes each, well inside the 4 KiB every CUDA
// device accepts), and a larger batch launches once per this many.
inline constexpr int kMaxLaunchMembers = 32;

// One member's buffers in a batched launch.
struct MemberBuffers {
  const void* a;
  const void* b;  // null for ops with one input
  void* out;
};

// The members' buffers as a batched kernel reads them: one kernel parameter,
// indexed by blockIdx.z (pass it __grid_constant__, so that a dynamic index
// reads the parameter in place).
template <typename T, typename Out = T>
struct LaunchMembers {
  using Element = T;
  using Output = Out;
  struct Member {
    const T* a;
    const T* b;
    Out* out;
  };
  Member at[kMaxLaunchMembers];
};

// A batched launch: `count` members (1..kMaxLaunchMembers) of one problem,
// each on its own buffers, with no workspace.
struct BatchLaunchArgs {
  const Problem& p;
  const MemberBuffers* members;
  int count;
  cudaStream_t stream;

  template <typename T, typename Out = T>
  LaunchMembers<T, Out> As() const {
    LaunchMembers<T, Out> typed{};
    for (int i = 0; i < count; ++i) {
      typed.at[i] = {static_cast<const T*>(members[i].a), static_cast<const T*>(members[i].b),
                     static_cast<Out*>(members[i].out)};
    }
    return typed;
  }
};

// Enqueues every member's work as one kernel launch on args.stream, each
// member's result bit for bit what the variant's CudaLaunch writes for it
// alone. cudaErrorNotSupported, enqueueing nothing, where the variant has
// no one-launch form for the problem or the buffers.
using CudaBatchLaunch = LaunchResult(const BatchLaunchArgs&);

// Calls launch(args.As<float>()) or launch(args.As<double>()) by the
// problem's element type (args: LaunchArgs or BatchLaunchArgs): the body of
// a launcher for the 32- and 64-bit types. A 16-bit problem here is a ladder
// row that claims a dtype its launcher does not handle:
// cudaErrorNotSupported, never a reinterpretation.
template <typename Args, typename Launch>
LaunchResult ForElementType(const Args& args, const Launch& launch) {
  switch (args.p.dtype) {
    case DType::kFloat32: return launch(args.template As<float>());
    case DType::kFloat64: return launch(args.template As<double>());
    case DType::kFloat16:
    case DType::kBFloat16: return cudaErrorNotSupported;
  }
  return cudaErrorNotSupported;
}

// The same for launchers of the 16-bit types: launch(args.As<__half>()),
// args.As<__half, float>() when a float32 output is asked for, and likewise
// with __nv_bfloat16.
template <typename Args, typename Launch>
LaunchResult ForHalfElementType(const Args& args, const Launch& launch) {
  switch (args.p.dtype) {
    case DType::kFloat16:
      return args.p.float32_output ? launch(args.template As<__half, float>())
                                   : launch(args.template As<__half>());
    case DType::kBFloat16:
      return args.p.float32_output ? launch(args.template As<__nv_bfloat16, float>())
                                   : launch(args.template As<__nv_bfloat16>());
    case DType::kFloat32:
    case DType::kFloat64: return cudaErrorNotSupported;
  }
  return cudaErrorNotSupported;
}

// Either of the two above, by the problem's element type: the body of a
// launcher that has a kernel for every dtype.
template <typename Args, typename Launch>
LaunchResult ForAnyElementType(const Args& args, const Launch& launch) {
  return IsHalfPrecision(args.p.dtype) ? ForHalfElementType(args, launch)
                                       : ForElementType(args, launch);
}

// Every (input, output) element type pair the two dispatchers above reach:
// X(T, Out). A launcher template instantiated with this list has a body for
// each pair a ladder row can ask for.
#define GPUCOMPUTE_ELEMENT_TYPE_PAIRS(X) \
  X(float, float)                        \
  X(double, double)                      \
  X(__half, __half)                      \
  X(__half, float)                       \
  X(__nv_bfloat16, __nv_bfloat16)        \
  X(__nv_bfloat16, float)

}  // namespace gpucompute::kernels::cuda
