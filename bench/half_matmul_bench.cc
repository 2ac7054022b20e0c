// gpucompute-half-matmul-bench: the FP16 and BF16 MatMul rows, each beside
// a direct cublasGemmEx call (16-bit in and out, FP32 accumulation) timed in
// the same run, alternating with it launch by launch so that clocks and
// temperature drift alike for both:
//   - the `cublas` variant at 4096^3 and 8192^3 (target 0.97 of the direct call),
//   - `wmma` (tensor cores through WMMA) at 4096^3 (target 0.25 of cuBLAS BF16),
//     its output checked against cuBLAS's, and its configuration ablation,
//   - the mma.sync rungs (`mma_padded`, `mma_swizzled`: one kernel, padded
//     or XOR-swizzled shared tiles) at 4096^3 and 8192^3, their outputs
//     checked against cuBLAS's, and the swizzled one timed alternately with
//     the padded one (the Profile lesson's ratio),
//   - `wgmma` (Hopper warpgroup MMA fed by TMA) at 4096^3 and 8192^3, where the
//     device lists it (compute capability 9.0; target 0.90 of cuBLAS for BF16
//     at both sizes and FP16 at 8192^3), its output checked against cuBLAS's,
//   - `tiled32` FP16 at 4096^3, the SIMT kernel for contrast.
// Medians of CUDA-event timings after two warm-ups.
//   gpucompute-half-matmul-bench [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "check_cuda.h"
#include "cuda/matmul/matmul_kernels.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/registry.h"

namespace gk = gpucompute::kernels;
namespace gc = gpucompute::kernels::cuda;

namespace {

cudaStream_t g_stream;
cublasHandle_t g_cublas;
void* g_workspace;
int g_reps = 20;

struct Row {
  std::string what, dtype, shape, reference;
  double tflops = 0, reference_tflops = 0, target = 0;
  std::string note;
};
std::vector<Row> g_rows;

double Tflops(int64_t size, double ms) { return 2.0 * double(size) * size * size / (ms * 1e9); }

// One launch between two events, in milliseconds.
double TimeOnce(const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start, g_stream));
  launch();
  CHECK_CUDA(cudaEventRecord(stop, g_stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms;
}

// Median milliseconds of `a` and of `b`, timed alternately.
std::pair<double, double> TimePair(const std::function<void()>& a, const std::function<void()>& b) {
  for (int i = 0; i < 2; ++i) a(), b();
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  std::vector<double> ta, tb;
  for (int i = 0; i < g_reps; ++i) {
    ta.push_back(TimeOnce(a));
    tb.push_back(TimeOnce(b));
  }
  return {gpucompute::common::Median(ta), gpucompute::common::Median(tb)};
}

cudaDataType_t CudaType(gk::DType dtype) {
  return dtype == gk::DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
}

// The reference: cublasGemmEx on row-major operands (B first, m and n
// swapped), 16-bit in and out, FP32 accumulation, on the bench's stream and
// with the workspace the `cublas` variant gets.
void DirectGemm(gk::DType dtype, int64_t size, const void* a, const void* b, void* c) {
  const float one = 1, zero = 0;
  const int s = int(size);
  if (cublasSetStream(g_cublas, g_stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(g_cublas, g_workspace, gc::kCublasWorkspaceBytes) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasGemmEx(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, b, CudaType(dtype), s, a,
                   CudaType(dtype), s, &zero, c, CudaType(dtype), s, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasGemmEx failed\n");
    std::exit(1);
  }
}

// NaN in every byte of the variant's output, so that a launch that writes
// nothing cannot pass the comparison with cuBLAS on an earlier result.
void Poison(void* c) { CHECK_CUDA(cudaMemset(c, 0xFF, size_t(8192) * 8192 * 4)); }

// The variants are found as the project's convention asks (no names outside
// kernels/): the vendor reference by its role, the tensor-core variant by its
// lesson, and the SIMT kernel as the variant that lesson is taught against.
const gk::Variant& Required(const gk::Variant* v, const char* what) {
  if (v == nullptr) {
    std::fprintf(stderr, "no CUDA MatMul variant %s\n", what);
    std::exit(1);
  }
  return *v;
}
const gk::Variant& VendorReference() {
  return Required(gk::DefaultRegistry().WithRole(gk::Op::kMatMul, gk::Backend::kCuda,
                                                 gk::VariantRole::kVendorReference),
                  "plays the vendor reference");
}
const gk::Variant& TensorCores() {
  const gk::Variant* found = nullptr;
  for (const gk::Variant* v : gk::DefaultRegistry().List(gk::Op::kMatMul, gk::Backend::kCuda)) {
    if (v->HasLesson() && v->lesson.idea == "tensor cores") found = v;
  }
  return Required(found, "teaches tensor cores");
}
// The mma.sync rungs by their lessons' ideas.
const gk::Variant& WithIdea(std::string_view idea) {
  const gk::Variant* found = nullptr;
  for (const gk::Variant* v : gk::DefaultRegistry().List(gk::Op::kMatMul, gk::Backend::kCuda)) {
    if (v->HasLesson() && v->lesson.idea == idea) found = v;
  }
  return Required(found, ("teaches " + std::string(idea)).c_str());
}
const gk::Variant& MmaPadded() { return WithIdea("mma.sync + ldmatrix"); }
const gk::Variant& MmaSwizzled() { return WithIdea("XOR swizzle"); }
// The warpgroup-MMA variant, by its lesson; null where the device does not
// list it (it needs compute capability 9.0).
const gk::Variant* WarpgroupMma() {
  for (const gk::Variant* v : gk::DefaultRegistry().List(gk::Op::kMatMul, gk::Backend::kCuda)) {
    if (v->HasLesson() && v->lesson.idea == "warpgroup MMA + TMA") return v;
  }
  return nullptr;
}
const gk::Variant& Simt() {
  return Required(
      gk::DefaultRegistry().Find(gk::Op::kMatMul, gk::Backend::kCuda, TensorCores().lesson.before),
      "is the tensor-core lesson's before");
}

// A registered variant's launch, exiting on failure.
std::function<void()> VariantLaunch(const gk::Variant& variant, const gk::Problem& p, const void* a,
                                    const void* b, void* c) {
  const gk::Variant* v = &variant;
  return [v, p, a, b, c] {
    gk::Buffers buf;
    buf.a = a;
    buf.b = b;
    buf.out = c;
    buf.workspace = g_workspace;
    buf.workspace_bytes = gc::kCublasWorkspaceBytes;
    gk::LaunchContext ctx;
    ctx.stream = g_stream;
    ctx.cublas = g_cublas;
    const absl::Status s = v->launch(p, buf, ctx);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      std::exit(1);
    }
  };
}

gk::Problem Square(gk::DType dtype, int64_t size) {
  gk::Problem p;
  p.op = gk::Op::kMatMul;
  p.dtype = dtype;
  p.m = p.n = p.k = size;
  return p;
}

std::string Sci(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2e", v);
  return text;
}

std::string Shape(int64_t s) {
  return std::to_string(s) + "x" + std::to_string(s) + "x" + std::to_string(s);
}

// Largest |got - want| over max(1, max|want|), both 16-bit of `dtype`.
double MaxRelativeDifference(gk::DType dtype, const void* got, const void* want, int64_t count) {
  std::vector<uint16_t> g(static_cast<size_t>(count)), w(static_cast<size_t>(count));
  CHECK_CUDA(cudaMemcpy(g.data(), got, size_t(count) * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(w.data(), want, size_t(count) * 2, cudaMemcpyDeviceToHost));
  auto value = [dtype](uint16_t bits) {
    return dtype == gk::DType::kFloat16 ? double(gk::ToFloat(gk::Float16{bits}))
                                        : double(gk::ToFloat(gk::BFloat16{bits}));
  };
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < count; ++i) {
    const double gv = value(g[size_t(i)]), wv = value(w[size_t(i)]);
    scale = std::max(scale, std::fabs(wv));
    worst = std::max(worst, std::isnan(gv - wv) ? INFINITY : std::fabs(gv - wv));
  }
  return worst / scale;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_reps = 5;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "gpucompute-half-matmul-bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  if (cublasCreate(&g_cublas) != CUBLAS_STATUS_SUCCESS) return 1;
  CHECK_CUDA(cudaMalloc(&g_workspace, gc::kCublasWorkspaceBytes));

  // Inputs in [-1, 1] for the largest size; smaller sizes use their prefix.
  const int64_t max_size = 8192, max_elements = max_size * max_size;
  std::vector<float> values(static_cast<size_t>(max_elements));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (float& v : values) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = float(int64_t(state >> 40) - (int64_t(1) << 23)) / float(1 << 23);
  }
  void *a, *b, *c, *c_ref;
  CHECK_CUDA(cudaMalloc(&a, size_t(max_elements) * 2));
  CHECK_CUDA(cudaMalloc(&b, size_t(max_elements) * 2));
  CHECK_CUDA(cudaMalloc(&c, size_t(max_elements) * 4));
  CHECK_CUDA(cudaMalloc(&c_ref, size_t(max_elements) * 4));
  auto upload = [&](gk::DType dtype) {
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i] = dtype == gk::DType::kFloat16 ? gk::ToFloat16(values[i]).bits
                                             : gk::ToBFloat16(values[i]).bits;
    }
    CHECK_CUDA(cudaMemcpy(a, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
    // B: the same values read backwards, so that B is not A.
    std::reverse(bits.begin(), bits.end());
    CHECK_CUDA(cudaMemcpy(b, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  };

  double cublas_bf16_4096 = 0, cublas_fp16_4096 = 0;
  for (gk::DType dtype : {gk::DType::kFloat16, gk::DType::kBFloat16}) {
    upload(dtype);
    const char* name = gk::DTypeName(dtype);
    for (int64_t size : {int64_t(4096), int64_t(8192)}) {
      const gk::Problem p = Square(dtype, size);
      Poison(c);
      const auto [direct_ms, variant_ms] = TimePair([&] { DirectGemm(dtype, size, a, b, c_ref); },
                                                    VariantLaunch(VendorReference(), p, a, b, c));
      const double direct = Tflops(size, direct_ms);
      if (size == 4096)
        (dtype == gk::DType::kFloat16 ? cublas_fp16_4096 : cublas_bf16_4096) = direct;
      const double diff = MaxRelativeDifference(dtype, c, c_ref, size * size);
      g_rows.push_back({VendorReference().name, name, Shape(size), "cublasGemmEx",
                        Tflops(size, variant_ms), direct, 0.97,
                        diff == 0 ? "same bits" : "differs by " + Sci(diff)});
    }
    // wgmma against cuBLAS of the same dtype, timed alternately with it.
    if (const gk::Variant* wgmma = WarpgroupMma(); wgmma != nullptr) {
      for (int64_t size : {int64_t(4096), int64_t(8192)}) {
        const gk::Problem p = Square(dtype, size);
        Poison(c);
        const auto [direct_ms, wgmma_ms] = TimePair([&] { DirectGemm(dtype, size, a, b, c_ref); },
                                                    VariantLaunch(*wgmma, p, a, b, c));
        const double diff = MaxRelativeDifference(dtype, c, c_ref, size * size);
        const double bound = dtype == gk::DType::kFloat16 ? 1.0 / 1024 : 1.0 / 128;
        const double target = dtype == gk::DType::kBFloat16 || size == 8192 ? 0.90 : 0;
        g_rows.push_back(
            {wgmma->name, name, Shape(size), "cublasGemmEx", Tflops(size, wgmma_ms),
             Tflops(size, direct_ms), target,
             "max diff vs cuBLAS " + Sci(diff) + (diff <= 2 * bound ? " (ok)" : " (TOO LARGE)")});
      }
    } else {
      std::printf("no warpgroup-MMA variant on this device (it needs compute capability 9.0)\n");
    }
    // wmma against cuBLAS of the same dtype, timed alternately with it.
    const int64_t size = 4096;
    const gk::Problem p = Square(dtype, size);
    Poison(c);
    const auto [direct_ms, wmma_ms] = TimePair([&] { DirectGemm(dtype, size, a, b, c_ref); },
                                               VariantLaunch(TensorCores(), p, a, b, c));
    const double diff = MaxRelativeDifference(dtype, c, c_ref, size * size);
    const double bound = dtype == gk::DType::kFloat16 ? 1.0 / 1024 : 1.0 / 128;
    g_rows.push_back(
        {TensorCores().name, name, Shape(size), "cublasGemmEx", Tflops(size, wmma_ms),
         Tflops(size, direct_ms), 0.25,
         "max diff vs cuBLAS " + Sci(diff) + (diff <= 2 * bound ? " (ok)" : " (TOO LARGE)")});
    gk::Problem p32 = p;
    p32.float32_output = true;
    const auto [direct32_ms, wmma32_ms] = TimePair([&] { DirectGemm(dtype, size, a, b, c_ref); },
                                                   VariantLaunch(TensorCores(), p32, a, b, c));
    g_rows.push_back({TensorCores().name + " -> float32", name, Shape(size),
                      "cublasGemmEx (16-bit out)", Tflops(size, wmma32_ms),
                      Tflops(size, direct32_ms), 0, ""});

    // The mma.sync rungs against cuBLAS of the same dtype and size.
    for (int64_t mma_size : {int64_t(4096), int64_t(8192)}) {
      for (const gk::Variant* v : {&MmaPadded(), &MmaSwizzled()}) {
        Poison(c);
        const auto [ref_ms, ms] = TimePair([&] { DirectGemm(dtype, mma_size, a, b, c_ref); },
                                           VariantLaunch(*v, Square(dtype, mma_size), a, b, c));
        const double mma_diff = MaxRelativeDifference(dtype, c, c_ref, mma_size * mma_size);
        g_rows.push_back({v->name, name, Shape(mma_size), "cublasGemmEx", Tflops(mma_size, ms),
                          Tflops(mma_size, ref_ms), 0,
                          "max diff vs cuBLAS " + Sci(mma_diff) +
                              (mma_diff <= 2 * bound ? " (ok)" : " (TOO LARGE)")});
      }
    }
    // The lesson's pair, timed alternately with each other: the swizzled
    // layout against the padded one at the same tile shape.
    const auto [padded_ms, swizzled_ms] =
        TimePair(VariantLaunch(MmaPadded(), p, a, b, c), VariantLaunch(MmaSwizzled(), p, a, b, c));
    g_rows.push_back({MmaSwizzled().name, name, Shape(size), MmaPadded().name,
                      Tflops(size, swizzled_ms), Tflops(size, padded_ms), 0, ""});
  }

  // BF16 is uploaded: the wmma configurations (k-tile, stages, blocks/SM,
  // warp tile width).
  for (const gc::WmmaConfig& cfg : gc::kWmmaConfigs) {
    const int64_t size = 4096;
    auto launch = [&] {
      CHECK_CUDA(gc::LaunchWmmaMatMulConfig(
          static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b),
          static_cast<__nv_bfloat16*>(c), size, size, size, cfg, g_stream));
    };
    Poison(c);
    const auto [direct_ms, ms] =
        TimePair([&] { DirectGemm(gk::DType::kBFloat16, size, a, b, c_ref); }, launch);
    const double diff = MaxRelativeDifference(gk::DType::kBFloat16, c, c_ref, size * size);
    g_rows.push_back({"wmma bk" + std::to_string(cfg.bk) + " st" + std::to_string(cfg.stages) +
                          " b" + std::to_string(cfg.min_blocks) + " w" + std::to_string(cfg.warp_n),
                      "bfloat16", Shape(size), "cublasGemmEx", Tflops(size, ms),
                      Tflops(size, direct_ms), 0, "max diff " + Sci(diff)});
  }

  // The SIMT contrast (tiled32 today) on FP16: one scalar FMA per thread and
  // step.
  upload(gk::DType::kFloat16);
  {
    const int64_t size = 4096;
    const int saved = g_reps;
    g_reps = std::min(g_reps, 5);
    const auto [direct_ms, ms] =
        TimePair([&] { DirectGemm(gk::DType::kFloat16, size, a, b, c_ref); },
                 VariantLaunch(Simt(), Square(gk::DType::kFloat16, size), a, b, c));
    g_reps = saved;
    g_rows.push_back({Simt().name, "float16", Shape(size), "cublasGemmEx", Tflops(size, ms),
                      Tflops(size, direct_ms), 0, ""});
  }

  std::printf("\n%-18s %-9s %-15s %9s %-26s %9s %7s %7s  %s\n", "variant", "dtype", "shape",
              "TFLOP/s", "reference", "ref TF/s", "ratio", "target", "note");
  bool all_met = true;
  for (const Row& r : g_rows) {
    const double ratio = r.reference_tflops > 0 ? r.tflops / r.reference_tflops : 0;
    const bool met = r.target == 0 || ratio >= r.target;
    all_met = all_met && met;
    std::printf("%-18s %-9s %-15s %9.1f %-26s %9.1f %7.3f %7s  %s%s\n", r.what.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.tflops, r.reference.c_str(), r.reference_tflops,
                ratio, r.target > 0 ? (std::to_string(r.target).substr(0, 4)).c_str() : "-",
                r.target > 0 ? (met ? "MET " : "MISSED ") : "", r.note.c_str());
  }
  std::printf("cuBLAS 4096^3 direct: FP16 %.1f, BF16 %.1f TFLOP/s\n", cublas_fp16_4096,
              cublas_bf16_4096);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(c_ref), cudaFree(g_workspace);
  cublasDestroy(g_cublas);
  cudaStreamDestroy(g_stream);
  return all_met ? 0 : 3;
}
