// Registers the CUDA variants: each wraps a launcher from the kernel files
// and turns CUDA errors into absl::Status.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "cuda/matmul/matmul_kernels.h"
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace {

absl::Status FromCuda(cudaError_t err, const std::string& variant) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("CUDA error in ", variant, ": ", cudaGetErrorName(err), ": ",
                   cudaGetErrorString(err)));
}

cudaStream_t StreamOf(const LaunchContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// A matmul variant built from a launcher template instantiated for both dtypes.
template <template <typename> class Launch>
Variant MatMulVariant(std::string name, std::string description) {
  Variant v;
  v.op = Op::kMatMul;
  v.name = std::move(name);
  v.description = std::move(description);
  v.dtypes = {DType::kFloat32, DType::kFloat64};
  v.backend = Backend::kCuda;
  v.launch = [name = v.name](const Problem& p, const Buffers& buf, const LaunchContext& ctx) {
    const cudaError_t err =
        p.dtype == DType::kFloat32
            ? Launch<float>()(static_cast<const float*>(buf.a), static_cast<const float*>(buf.b),
                              static_cast<float*>(buf.out), p, StreamOf(ctx))
            : Launch<double>()(static_cast<const double*>(buf.a),
                               static_cast<const double*>(buf.b),
                               static_cast<double*>(buf.out), p, StreamOf(ctx));
    return FromCuda(err, name);
  };
  return v;
}

template <typename T>
struct NaiveMatMul {
  cudaError_t operator()(const T* a, const T* b, T* c, const Problem& p, cudaStream_t s) {
    return cuda::LaunchNaiveMatMul<T>(a, b, c, p.m, p.n, p.k, s);
  }
};

}  // namespace

void RegisterCudaVariants(Registry& registry) {
  (void)registry.Add(MatMulVariant<NaiveMatMul>(
      "naive", "one thread per output element, A and B read from global memory"));
}

bool BuiltWithCuda() { return true; }

}  // namespace gpucompute::kernels
