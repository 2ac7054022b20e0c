// Registers the CUDA ladders (kernels/cuda/<op>/ladder.cc): each row's
// launcher behind the registry's checks, its CUDA and cuBLAS errors turned
// into absl::Status by the one converter (cuda_status.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/ladder.h"
#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace cuda {

namespace {

// Variant::launch's call of a CUDA launcher: the registry's buffers and
// context as LaunchArgs, the launch's errors as an absl::Status naming `name`.
std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> CallOf(
    const std::string& name, CudaLaunch* launch) {
  return [name, launch](const Problem& p, const Buffers& buf, const LaunchContext& ctx) {
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
}

// Whether sm_90a code runs on every visible device: at least one device,
// each of compute capability 9.0 (sm_90a code runs on nothing else).
bool DevicesRunSm90a() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no driver or no device: nothing sticky to leave behind
    return false;
  }
  for (int device = 0; device < count; ++device) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (major != 9 || minor != 0) return false;
  }
  return true;
}

}  // namespace

absl::Status AddCudaLadder(Registry& registry, Op op, std::span<const CudaLadderRow> rows) {
  // Rows built for sm_90a alone are left out where a device could not run
  // them.
  static const bool sm90a = DevicesRunSm90a();
  std::vector<CudaLadderRow> listed;
  for (const CudaLadderRow& row : rows) {
    if (!row.requires_sm90a || sm90a) listed.push_back(row);
  }
  return AddLadder(registry, op, Backend::kCuda, std::span<const CudaLadderRow>(listed), CallOf);
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
