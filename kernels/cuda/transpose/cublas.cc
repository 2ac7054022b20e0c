// Transpose through cublas<t>geam: C = 1 * op(A) + 0 * B with op(A) = A^T.
// A row-major m x n matrix is a column-major n x m one, so the column-major
// result of shape m x n (leading dimension m) is the row-major n x m output.
// geam has no 16-bit version: FP16 and BF16 go through
// cublasLtMatrixTransform, the same operation with those types.
#include <cublasLt.h>
#include <cublas_v2.h>

#include "cuda/launcher.h"
#include "cuda/transpose/transpose_kernels.h"

namespace gpucompute::kernels::cuda {
namespace {

cublasStatus_t Geam(cublasHandle_t h, int m, int n, const float* in, float* out) {
  const float one = 1, zero = 0;
  return cublasSgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &one, in, n, &zero, out, m, out, m);
}
cublasStatus_t Geam(cublasHandle_t h, int m, int n, const double* in, double* out) {
  const double one = 1, zero = 0;
  return cublasDgeam(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, &one, in, n, &zero, out, m, out, m);
}

// C = 1 * A^T in `type` (CUDA_R_16F or CUDA_R_16BF), with no B (beta = 0).
// The descriptors are the semi-opaque kind, initialized on the stack: no
// allocation per call. A cublasHandle_t serves as a cublasLtHandle_t (cuBLAS
// documents the cast).
cublasStatus_t LtTranspose(cublasHandle_t h, cudaDataType_t type, int64_t m, int64_t n,
                           const void* in, void* out, cudaStream_t stream) {
  cublasLtMatrixTransformDescOpaque_t desc_storage;
  cublasLtMatrixLayoutOpaque_t a_storage, c_storage;
  const auto desc = &desc_storage;
  const auto a = &a_storage, c = &c_storage;
  // The scale is FP32; 1 * x is exact for every 16-bit value.
  cublasStatus_t st = cublasLtMatrixTransformDescInit(desc, CUDA_R_32F);
  const cublasOperation_t trans = CUBLAS_OP_T;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixTransformDescSetAttribute(desc, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA,
                                                 &trans, sizeof trans);
  }
  // A as stored: column-major n x m (leading dimension n); C: m x n (ld m).
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutInit(a, type, n, m, n);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutInit(c, type, m, n, m);
  const float one = 1, zero = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatrixTransform(reinterpret_cast<cublasLtHandle_t>(h), desc, &one, in, a, &zero,
                                 nullptr, nullptr, out, c, stream);
  }
  return st;
}

}  // namespace

template <typename T>
cudaError_t LaunchCublasTranspose(const T* in, T* out, int64_t m, int64_t n, void* cublas_handle,
                                  cudaStream_t stream, int* cublas_status) {
  auto handle = static_cast<cublasHandle_t>(cublas_handle);
  if (handle == nullptr) {
    *cublas_status = CUBLAS_STATUS_NOT_INITIALIZED;
    return cudaSuccess;
  }
  if (m > INT32_MAX || n > INT32_MAX) {
    *cublas_status = CUBLAS_STATUS_INVALID_VALUE;
    return cudaSuccess;
  }
  cublasStatus_t st = cublasSetStream(handle, stream);
  // beta = 0: B is not read; it aliases C with ldb == ldc, which geam allows.
  if (st == CUBLAS_STATUS_SUCCESS) st = Geam(handle, int(m), int(n), in, out);
  *cublas_status = int(st);
  return cudaGetLastError();
}

template cudaError_t LaunchCublasTranspose<float>(const float*, float*, int64_t, int64_t, void*,
                                                  cudaStream_t, int*);
template cudaError_t LaunchCublasTranspose<double>(const double*, double*, int64_t, int64_t, void*,
                                                   cudaStream_t, int*);

LaunchResult CublasTranspose(const LaunchArgs& args) {
  if (IsHalfPrecision(args.p.dtype)) {
    auto handle = static_cast<cublasHandle_t>(args.cublas);
    if (handle == nullptr) return LaunchResult(cudaSuccess, CUBLAS_STATUS_NOT_INITIALIZED);
    const cudaDataType_t type = args.p.dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
    const cublasStatus_t st =
        LtTranspose(handle, type, args.p.m, args.p.n, args.a, args.out, args.stream);
    return LaunchResult(cudaGetLastError(), int(st));
  }
  return ForElementType(args, [](const auto& t) {
    int status = 0;
    const cudaError_t err =
        LaunchCublasTranspose(t.a, t.out, t.p.m, t.p.n, t.cublas, t.stream, &status);
    return LaunchResult(err, status);
  });
}

}  // namespace gpucompute::kernels::cuda
