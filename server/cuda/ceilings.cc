#include "server/cuda/ceilings.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>

#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/cuda_timer.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/fill.h"
#include "server/cuda/read_ceiling.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;
using kernels::cuda::CudaStatus;

namespace {

// The fastest of six timed runs of `launch` after two untimed ones, in
// seconds: a ceiling is what the device can do, and anything else running
// on it (another server starting beside this one) only slows a run down.
absl::StatusOr<double> BestSeconds(Slot& slot, const std::function<absl::Status()>& launch) {
  auto ms = kernels::cuda::TimeLaunches(slot.timer(), slot.stream(), /*warmup=*/2,
                                        /*repetitions=*/6, launch);
  if (!ms.ok()) return ms.status();
  if (ms->empty()) return absl::InternalError("ceilings: no timed run");
  return *std::min_element(ms->begin(), ms->end()) * 1e-3;
}

// Bytes read per second by a streaming read kernel over `bytes` of `data`
// (far beyond the L2): the best of the shapes tried, each the best of its
// runs. Reductions are held to it, since they read and write nothing else.
absl::StatusOr<double> MeasureReadBandwidth(Slot& slot, const float* data, size_t bytes,
                                            float* sink) {
  int device = 0, sms = 0;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  double best = 0;
  // 8 and 16 blocks of 256 threads per SM (full occupancy, and twice that
  // for the tail), 4 or 8 loads in flight per thread.
  for (int blocks_per_sm : {8, 16}) {
    for (int in_flight : {4, 8}) {
      auto seconds = BestSeconds(slot, [&] {
        return CudaStatus(LaunchStreamingRead(data, int64_t(bytes / sizeof(float)), sink,
                                              sms * blocks_per_sm, in_flight, slot.stream()),
                          "streaming read");
      });
      if (!seconds.ok()) return seconds.status();
      best = std::max(best, double(bytes) / *seconds / 1e9);
    }
  }
  return best;
}

int64_t L2Bytes() {
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return l2;
}

}  // namespace

absl::StatusOr<Ceilings> MeasureCeilings(Slot& slot, std::atomic<int64_t>& device_malloc_calls) {
  const cudaStream_t stream = slot.stream();
  const cublasHandle_t cublas = slot.cublas();
  const size_t copy_bytes = size_t{512} << 20;
  auto src = DeviceMalloc(copy_bytes, "cudaMalloc(ceilings)", device_malloc_calls);
  if (!src.ok()) return src.status();
  auto dst = DeviceMalloc(copy_bytes, "cudaMalloc(ceilings)", device_malloc_calls);
  if (!dst.ok()) return dst.status();
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      FillUniform(kernels::DType::kFloat32, src->get(), copy_bytes / 4, 7, stream), "fill");

  Ceilings ceilings;
  auto copy_s = BestSeconds(slot, [&] {
    return CudaStatus(
        cudaMemcpyAsync(dst->get(), src->get(), copy_bytes, cudaMemcpyDeviceToDevice, stream),
        "copy");
  });
  if (!copy_s.ok()) return copy_s.status();
  ceilings.gbytes_per_s = 2.0 * double(copy_bytes) / *copy_s / 1e9;
  auto read_gbps = MeasureReadBandwidth(slot, static_cast<const float*>(src->get()), copy_bytes,
                                        static_cast<float*>(dst->get()));
  if (!read_gbps.ok()) return read_gbps.status();
  ceilings.gbytes_per_s_read = *read_gbps;
  ceilings.cache_bytes = L2Bytes();

  // 4096^3 GEMMs on random data in the copy buffers (2 x 64 MiB + 64 MiB).
  constexpr int n = 4096;
  constexpr double kFlops = 2.0 * n * double(n) * n;
  if (auto s = CublasStatus(cublasSetStream(cublas, stream), "cublasSetStream"); !s.ok()) return s;
  const float* fa = static_cast<const float*>(src->get());
  float* fc = static_cast<float*>(dst->get());
  const float f1 = 1, f0 = 0;
  // SGEMM GFLOP/s in `mode`: pedantic FP32, then TF32 tensor cores.
  auto sgemm_gflops = [&](cublasMath_t mode, const char* what) -> absl::StatusOr<double> {
    if (auto s = CublasStatus(cublasSetMathMode(cublas, mode), "cublasSetMathMode"); !s.ok())
      return s;
    auto seconds = BestSeconds(slot, [&] {
      return CublasStatus(cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &f1, fa, n,
                                      fa + size_t(n) * n, n, &f0, fc, n),
                          what);
    });
    if (!seconds.ok()) return seconds.status();
    return kFlops / *seconds / 1e9;
  };
  auto fp32 = sgemm_gflops(CUBLAS_PEDANTIC_MATH, "cublasSgemm");
  if (!fp32.ok()) return fp32.status();
  ceilings.gflops = *fp32;
  auto tf32 = sgemm_gflops(CUBLAS_TF32_TENSOR_OP_MATH, "cublasSgemm(TF32)");
  if (!tf32.ok()) return tf32.status();
  ceilings.gflops_tf32 = *tf32;

  // BF16 in and out, FP32 accumulate: the 16-bit tensor-core rate (FP16 runs
  // at the same rate on current GPUs).
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      FillUniform(kernels::DType::kBFloat16, src->get(), 2 * int64_t(n) * n, 13, stream), "fill");
  if (auto s = CublasStatus(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
      !s.ok())
    return s;
  auto half_s = BestSeconds(slot, [&] {
    return CublasStatus(
        cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &f1, fa, CUDA_R_16BF, n,
                     static_cast<const char*>(src->get()) + 2 * size_t(n) * n, CUDA_R_16BF, n, &f0,
                     fc, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx(BF16)");
  });
  if (!half_s.ok()) return half_s.status();
  ceilings.gflops_half = kFlops / *half_s / 1e9;

  if (auto s = CublasStatus(cublasSetMathMode(cublas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
      !s.ok())
    return s;
  double* da = static_cast<double*>(src->get());
  double* dc = static_cast<double*>(dst->get());
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      FillUniform(kernels::DType::kFloat64, da, 2 * int64_t(n) * n, 11, stream), "fill");
  const double d1 = 1, d0 = 0;
  auto dgemm_s = BestSeconds(slot, [&] {
    return CublasStatus(cublasDgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &d1, da, n,
                                    da + size_t(n) * n, n, &d0, dc, n),
                        "cublasDgemm");
  });
  if (!dgemm_s.ok()) return dgemm_s.status();
  ceilings.gflops_fp64 = kFlops / *dgemm_s / 1e9;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return ceilings;
}

}  // namespace gpucompute::server::cuda
