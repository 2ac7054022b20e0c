// Registers the CUDA ladders (kernels/cuda/<op>/ladder.cc): each row's
// launcher behind the registry's checks, its CUDA and cuBLAS errors turned
// into absl::Status by the one converter (cuda_status.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Sets variant.launch_batch to call `launch`: the problem checked as for a
// launch alone (ProblemCheck) and the member count too, the registry's
// buffers as MemberBuffers, a launch error as an absl::Status naming the
// variant, cudaErrorNotSupported as false (no one-launch form for these
// buffers).
void SetBatchLaunch(Variant& variant, CudaBatchLaunch* launch) {
  variant.max_batch_members = kMaxLaunchMembers;
  variant.launch_batch = [check = ProblemCheck(variant), name = variant.name, launch](
                             const Problem& p, std::span<const Buffers> members,
                             const LaunchContext& ctx) -> absl::StatusOr<bool> {
    if (absl::Status s = check(p); !s.ok()) return s;
    if (members.empty() || members.size() > size_t(kMaxLaunchMembers)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": a batched launch takes 1 to ",
                                                     kMaxLaunchMembers, " members, not ",
                                                     members.size()));
    }
    MemberBuffers buffers[kMaxLaunchMembers];
    for (size_t i = 0; i < members.size(); ++i) {
      buffers[i] = {members[i].a, members[i].b, members[i].out};
    }
    const LaunchResult result = launch(BatchLaunchArgs{
        .p = p,
        .members = buffers,
        .count = int(members.size()),
        .stream = static_cast<cudaStream_t>(ctx.stream),
    });
    if (result.cuda == cudaErrorNotSupported) return false;
    if (absl::Status s = CudaStatus(result.cuda, name.c_str()); !s.ok()) return s;
    return true;
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
  return AddLadder(registry, op, Backend::kCuda, std::span<const CudaLadderRow>(listed), CallOf,
                   SetBatchLaunch);
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
