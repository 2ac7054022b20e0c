// Transpose through cublas<t>geam: C = 1 * op(A) + 0 * B with op(A) = A^T.
// A row-major m x n matrix is a column-major n x m one, so the column-major
// result of shape m x n (leading dimension m) is the row-major n x m output.
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
  return ForElementType(args, [](const auto& t) {
    int status = 0;
    const cudaError_t err =
        LaunchCublasTranspose(t.a, t.out, t.p.m, t.p.n, t.cublas, t.stream, &status);
    return LaunchResult(err, status);
  });
}

}  // namespace gpucompute::kernels::cuda
