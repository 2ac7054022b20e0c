// cuBLAS GEMM for row-major operands: a row-major C = A*B is the column-major
// C^T = B^T * A^T, so the call passes B first and swaps m and n. FP16 and
// BF16 go through cublasGemmEx with FP32 accumulation (CUBLAS_COMPUTE_32F)
// and a 16-bit or float32 C.
#include <cublas_v2.h>

#include <type_traits>

#include "cuda/launcher.h"
#include "cuda/matmul/matmul_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t DataType() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, double>) return CUDA_R_64F;
  if constexpr (std::is_same_v<T, __half>) return CUDA_R_16F;
  return CUDA_R_16BF;
}

}  // namespace

template <typename T, typename Out>
cudaError_t LaunchCublasMatMul(const T* a, const T* b, Out* c, int64_t m, int64_t n, int64_t k,
                               bool tf32, void* cublas_handle, void* workspace,
                               size_t workspace_bytes, cudaStream_t stream, int* cublas_status) {
  *cublas_status = CUBLAS_STATUS_SUCCESS;
  auto handle = static_cast<cublasHandle_t>(cublas_handle);
  if (handle == nullptr) {
    *cublas_status = CUBLAS_STATUS_NOT_INITIALIZED;
    return cudaSuccess;
  }
  // cuBLAS takes 32-bit dimensions here.
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
    *cublas_status = CUBLAS_STATUS_INVALID_VALUE;
    return cudaSuccess;
  }
  // Binding a stream resets the workspace, so the caller's workspace is set
  // after it: cuBLAS then allocates nothing during the call.
  cublasStatus_t st = cublasSetStream(handle, stream);
  if (st == CUBLAS_STATUS_SUCCESS && workspace != nullptr && workspace_bytes > 0) {
    st = cublasSetWorkspace(handle, workspace, workspace_bytes);
  }
  if (st == CUBLAS_STATUS_SUCCESS) {
    // alpha and beta have the compute type's scalar type: double for FP64,
    // float otherwise (16-bit inputs accumulate in float).
    using Scalar = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const Scalar one = 1, zero = 0;
    const cudaDataType_t type = DataType<T>();
    // Plain FP32 compute never uses TF32 unless asked for; FP64 stays FP64.
    const cublasComputeType_t compute = std::is_same_v<T, double> ? CUBLAS_COMPUTE_64F
                                        : tf32                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                  : CUBLAS_COMPUTE_32F;
    st = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, b, type,
                      int(n), a, type, int(k), &zero, c, DataType<Out>(), int(n), compute,
                      CUBLAS_GEMM_DEFAULT);
  }
  *cublas_status = int(st);
  return cudaGetLastError();
}

#define GPUCOMPUTE_CUBLAS(T, Out)                                                             \
  template cudaError_t LaunchCublasMatMul<T, Out>(const T*, const T*, Out*, int64_t, int64_t, \
                                                  int64_t, bool, void*, void*, size_t,        \
                                                  cudaStream_t, int*);
GPUCOMPUTE_ELEMENT_TYPE_PAIRS(GPUCOMPUTE_CUBLAS)
#undef GPUCOMPUTE_CUBLAS

namespace {

template <typename T, typename Out>
LaunchResult Gemm(const TypedLaunchArgs<T, Out>& t, bool tf32) {
  int status = 0;
  const cudaError_t err = LaunchCublasMatMul(t.a, t.b, t.out, t.p.m, t.p.n, t.p.k, tf32, t.cublas,
                                             t.workspace, t.workspace_bytes, t.stream, &status);
  return LaunchResult(err, status);
}

}  // namespace

LaunchResult CublasMatMul(const LaunchArgs& args) {
  const auto gemm = [](const auto& t) { return Gemm(t, false); };
  return ForAnyElementType(args, gemm);
}

// Float only (the ladder declares it so).
LaunchResult CublasTf32MatMul(const LaunchArgs& args) { return Gemm(args.As<float>(), true); }

size_t CublasMatMulWorkspaceBytes(const Problem&) { return kCublasWorkspaceBytes; }

}  // namespace gpucompute::kernels::cuda
