// Registers the CUDA ladders (kernels/cuda/<op>/ladder.cc): each row's
// launcher behind the registry's checks, its CUDA and cuBLAS errors turned
// into absl::Status by the one converter (cuda_status.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "cuda/ladder.h"
#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace cuda {

absl::Status AddCudaLadder(Registry& registry, Op op, std::span<const CudaLadderRow> rows) {
  return AddLadder(registry, op, Backend::kCuda, rows, [](const std::string& name, CudaLaunch* launch) {
    return [name, launch](const Problem& p, const Buffers& buf,
                          const LaunchContext& ctx) -> absl::Status {
      const LaunchResult result = launch(LaunchArgs{
          .p = p,
          .a = buf.a,
          .b = buf.b,
          .out = buf.out,
          .workspace = buf.workspace,
          .workspace_bytes = buf.workspace_bytes,
          .stream = static_cast<cudaStream_t>(ctx.stream),
          .cublas = ctx.cublas,
      });
      if (absl::Status s = CudaStatus(result.cuda, name.c_str()); !s.ok()) return s;
      return CublasStatus(static_cast<cublasStatus_t>(result.cublas), name.c_str());
    };
  });
}

}  // namespace cuda

absl::Status RegisterCudaVariants(Registry& registry) {
  for (auto [op, rows] : {std::pair{Op::kMatMul, cuda::MatMulLadder()},
                          {Op::kTranspose, cuda::TransposeLadder()},
                          {Op::kReduce, cuda::ReduceLadder()}}) {
    if (absl::Status s = cuda::AddCudaLadder(registry, op, rows); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool BuiltWithCuda() { return true; }

}  // namespace gpucompute::kernels
