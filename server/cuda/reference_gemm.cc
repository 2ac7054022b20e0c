#include "server/cuda/reference_gemm.h"

#include <cublas_v2.h>

#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/fill.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;

absl::StatusOr<std::vector<double>> DeviceMatMulReference(const kernels::Problem& p, const void* a,
                                                          const void* b, RequestMemory& memory,
                                                          Slot& slot, HostCopyPool& copier) {
  const int64_t na = p.m * p.k, nb = p.k * p.n, nc = p.m * p.n;
  const double* a64 = static_cast<const double*>(a);
  const double* b64 = static_cast<const double*>(b);
  if (p.dtype != kernels::DType::kFloat64) {
    auto wa = memory.Get(8 * na);
    auto wb = memory.Get(8 * nb);
    if (!wa.ok()) return wa.status();
    if (!wb.ok()) return wb.status();
    a64 = static_cast<const double*>(*wa);
    b64 = static_cast<const double*>(*wb);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        WidenToDouble(p.dtype, a, static_cast<double*>(*wa), na, slot.stream()), "widen a");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        WidenToDouble(p.dtype, b, static_cast<double*>(*wb), nb, slot.stream()), "widen b");
  }
  auto c = memory.Get(8 * nc);
  if (!c.ok()) return c.status();
  // Row-major C = A * B is column-major C^T = B^T * A^T: B and A swap places.
  const double one = 1, zero = 0;
  if (auto s = CublasStatus(cublasSetStream(slot.cublas(), slot.stream()), "cublasSetStream");
      !s.ok())
    return s;
  if (auto s =
          CublasStatus(cublasSetMathMode(slot.cublas(), CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
      !s.ok()) {
    return s;
  }
  if (auto s = CublasStatus(
          cublasDgemm(slot.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, int(p.n), int(p.m), int(p.k), &one,
                      b64, int(p.n), a64, int(p.k), &zero, static_cast<double*>(*c), int(p.n)),
          "cublasDgemm(reference)");
      !s.ok()) {
    return s;
  }
  std::vector<double> ref(nc);
  if (auto s = slot.staging().Download(ref.data(), *c, 8 * nc, slot.stream(), copier); !s.ok())
    return s;
  return ref;
}

}  // namespace gpucompute::server::cuda
