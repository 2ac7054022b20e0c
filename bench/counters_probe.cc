// gpucompute-counters: one launch of each named variant on random inputs,
// for comparing Profile's hardware counters with Nsight Compute's.
//   --mode=cupti   reads the counters as Profile does (the server's CUPTI
//                  reader, the L2 flushed clean first) and prints
//                  "variant metric value" lines
//   --mode=launch  launches each variant once between cudaProfilerStart and
//                  cudaProfilerStop, for `ncu --profile-from-start off`
//   --mode=list    prints the variants' names, one a line
//   --mode=metrics prints every metric Profile can read, comma-separated
// bench/counters_vs_ncu.sh runs both and prints them side by side.
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/registry.h"
#include "server/cuda/cupti_counters.h"
#include "server/cuda/fill.h"
#include "server/cuda/read_ceiling.h"
#include "server/engine/hardware_counters.h"

ABSL_FLAG(std::string, op, "transpose", "matmul, transpose or reduce");
ABSL_FLAG(std::string, shape, "4096x4096", "MxN (transpose, reduce) or MxKxN (matmul)");
ABSL_FLAG(std::string, variants, "", "comma-separated variant names (empty: every CUDA one)");
ABSL_FLAG(std::string, mode, "cupti", "cupti, launch, list or metrics");

namespace gk = gpucompute::kernels;
namespace gs = gpucompute::server;
using gk::cuda::CudaStatus;

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "gpucompute-counters: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "metrics") {
    std::string all;
    for (const gs::CounterSpec& c : gs::ProfileCounters()) {
      if (!all.empty()) all.push_back(',');
      all.append(c.metric.data(), c.metric.size());
    }
    std::printf("%s\n", all.c_str());
    return 0;
  }
  gk::Problem p;
  const std::string op = absl::GetFlag(FLAGS_op);
  if (op == "matmul") {
    p.op = gk::Op::kMatMul;
  } else if (op == "transpose") {
    p.op = gk::Op::kTranspose;
  } else if (op == "reduce") {
    p.op = gk::Op::kReduce;
  } else {
    return Fail("--op: matmul, transpose or reduce");
  }
  std::vector<int64_t> dims;
  for (auto d : absl::StrSplit(absl::GetFlag(FLAGS_shape), 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 1) return Fail("--shape: positive numbers joined by x");
    dims.push_back(v);
  }
  if (dims.size() != (p.op == gk::Op::kMatMul ? 3u : 2u)) return Fail("--shape: wrong rank");
  p.m = dims[0];
  p.n = dims.back();
  p.k = p.op == gk::Op::kMatMul ? dims[1] : 1;

  std::vector<const gk::Variant*> variants;
  const std::string names = absl::GetFlag(FLAGS_variants);
  if (names.empty()) {
    for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
      if (v->Supports(p.dtype)) variants.push_back(v);
    }
  } else {
    for (auto name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
      const gk::Variant* v =
          gk::DefaultRegistry().Find(p.op, gk::Backend::kCuda, std::string(name));
      if (v == nullptr) return Fail("no variant " + std::string(name));
      variants.push_back(v);
    }
  }

  if (mode == "list") {
    for (const gk::Variant* v : variants) std::printf("%s\n", v->name.c_str());
    return 0;
  }

  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  int device = 0, sms = 0, l2 = 0;
  if (cudaStreamCreate(&stream) != cudaSuccess || cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    return Fail("no usable CUDA device");
  }
  const int64_t na = gk::InputAElements(p), nb = gk::InputBElements(p);
  const int64_t nout = gk::OutputElements(p);
  size_t ws_bytes = 0;
  for (const gk::Variant* v : variants) ws_bytes = std::max(ws_bytes, v->WorkspaceBytes(p));
  const int64_t flush_bytes = 2 * int64_t(l2);  // as Profile flushes
  void *a = nullptr, *b = nullptr, *out = nullptr, *ws = nullptr, *flush = nullptr;
  if (cudaMalloc(&a, na * 4) != cudaSuccess || (nb && cudaMalloc(&b, nb * 4) != cudaSuccess) ||
      cudaMalloc(&out, nout * 4) != cudaSuccess ||
      (ws_bytes && cudaMalloc(&ws, ws_bytes) != cudaSuccess) ||
      cudaMalloc(&flush, flush_bytes) != cudaSuccess) {
    return Fail("cudaMalloc failed");
  }
  gpucompute::server::cuda::FillUniform(gpucompute::kernels::DType::kFloat32, a, na, 1, stream);
  if (nb) {
    gpucompute::server::cuda::FillUniform(gpucompute::kernels::DType::kFloat32, b, nb, 2, stream);
  }
  cudaMemsetAsync(flush, 0, flush_bytes, stream);
  const gk::Buffers buffers{a, b, out, ws, ws_bytes};
  const gk::LaunchContext ctx{stream, cublas};

  int round = 0;
  auto flush_l2 = [&]() -> absl::Status {
    if (auto s = CudaStatus(
            gpucompute::server::cuda::FlushL2Clean(flush, flush_bytes, sms * 8, ++round, stream),
            "flush");
        !s.ok())
      return s;
    return CudaStatus(cudaStreamSynchronize(stream), "sync");
  };
  const bool cupti = mode == "cupti";
  for (const gk::Variant* v : variants) {
    auto launch = [&]() -> absl::Status {
      if (auto s = v->launch(p, buffers, ctx); !s.ok()) return s;
      return CudaStatus(cudaStreamSynchronize(stream), "sync");
    };
    // One untimed launch first: cuBLAS and CUB set themselves up on it.
    if (auto s = launch(); !s.ok()) return Fail(v->name + ": " + std::string(s.message()));
    if (cupti) {
      auto counters = gs::ReadVariantCounters(gpucompute::server::cuda::CuptiCounters(), *v, p,
                                              {flush_l2, launch});
      if (!counters.ok()) return Fail(v->name + ": " + std::string(counters.status().message()));
      if (!counters->note.empty())
        std::printf("# %s: %s\n", v->name.c_str(), counters->note.c_str());
      for (const gs::CounterValue& c : counters->values)
        std::printf("%s %s %.17g\n", v->name.c_str(), c.metric.c_str(), c.value);
    } else {
      if (auto s = flush_l2(); !s.ok()) return Fail(std::string(s.message()));
      cudaProfilerStart();
      absl::Status s = launch();
      cudaProfilerStop();
      if (!s.ok()) return Fail(v->name + ": " + std::string(s.message()));
      std::printf("%s launched\n", v->name.c_str());
    }
  }
  return 0;
}
