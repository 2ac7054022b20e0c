// A CUDA error fails its own request with INTERNAL and the CUDA text; a
// sticky error (the context is broken) takes the device out of service, so
// the scheduler stops placing work on it. Runs the CUDA device directly,
// since the broken context is this process's own.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "server/cuda/cuda_device.h"

namespace gpucompute::testing {
cudaError_t LaunchIllegalAddressKernel(cudaStream_t stream);
}

namespace gpucompute::server {
namespace {

int GpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

kernels::Variant FaultyVariant(bool sticky) {
  kernels::Variant v;
  v.op = kernels::Op::kTranspose;
  v.name = sticky ? "writes_out_of_bounds" : "fails_to_launch";
  v.dtypes = {kernels::DType::kFloat32};
  v.backend = kernels::Backend::kCuda;
  v.launch = [sticky](const kernels::Problem&, const kernels::Buffers&,
                      const kernels::LaunchContext& ctx) {
    if (!sticky) {
      return absl::InternalError("CUDA error in fails_to_launch: cudaErrorInvalidConfiguration");
    }
    const cudaError_t err =
        testing::LaunchIllegalAddressKernel(static_cast<cudaStream_t>(ctx.stream));
    return err == cudaSuccess ? absl::OkStatus() : absl::InternalError(cudaGetErrorString(err));
  };
  return v;
}

TEST(CudaDeviceFaults, OneBadRequestThenAStickyErrorTakesTheDeviceOut) {
  if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  CudaDeviceOptions options;
  options.streams_per_device = 2;
  auto device = cuda::OpenCudaDevice(0, options);
  ASSERT_TRUE(device.ok()) << device.status();
  const kernels::Variant ok_variant = [] {
    kernels::Variant v = FaultyVariant(false);
    v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
    return v;
  }();
  const kernels::Variant failing = FaultyVariant(false), sticky = FaultyVariant(true);
  std::vector<float> in(64 * 48, 1.0f), out(64 * 48);
  ComputeJob job;
  job.problem = kernels::Problem{kernels::Op::kTranspose, kernels::DType::kFloat32, 64, 48};
  job.a = {absl::Span<const char>(reinterpret_cast<const char*>(in.data()), in.size() * 4)};
  job.out = out.data();
  const StopRequested never = [] { return false; };

  job.variant = &failing;
  auto failed = (*device)->Execute(job, never);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE((*device)->healthy()) << "a failed launch must not take the device out";
  job.variant = &ok_variant;
  EXPECT_TRUE((*device)->Execute(job, never).ok()) << "the next request must still run";

  job.variant = &sticky;
  auto broken = (*device)->Execute(job, never);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(broken.status().message().find("taken out of service"), absl::string_view::npos)
      << broken.status();
  EXPECT_FALSE((*device)->healthy());
}

}  // namespace
}  // namespace gpucompute::server
