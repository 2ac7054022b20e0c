// gpucompute-bench: runs every registered CUDA variant at the standard sizes
// in one process and prints one table, each figure beside a reference
// measured in the same run (device-to-device memcpy, cuBLAS FP32 without
// TF32, CUB). Every variant's output is checked before it is timed. Timings
// are medians of CUDA-event measurements after warm-up.
//   gpucompute-bench [--json FILE] [--quick]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "bench_device.h"
#include "cuda/matmul/matmul_kernels.h"
#include "cuda/transpose/transpose_kernels.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/registry.h"

namespace gk = gpucompute::kernels;
namespace gb = gpucompute::bench;

namespace {

#define CHECK_CUDA(expr)                                                                 \
  do {                                                                                   \
    const cudaError_t err_ = (expr);                                                     \
    if (err_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                 \
                   cudaGetErrorString(err_));                                            \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

struct Row {
  std::string op, dtype, shape, variant;
  double median_ms = 0, gflops = 0, gbytes = 0;
  std::string reference;  // what `ratio` divides by
  double reference_value = 0, ratio = 0;
  bool ok = false;
  std::string note;
};

struct Device {
  void* ptr = nullptr;
  explicit Device(size_t bytes) { CHECK_CUDA(cudaMalloc(&ptr, std::max<size_t>(bytes, 1))); }
  ~Device() { cudaFree(ptr); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

cudaStream_t g_stream;
cublasHandle_t g_cublas;
int g_min_reps = 10;
double g_budget_ms = 400;

// Median milliseconds of `launch` over events, after two warm-ups; repeats
// until about g_budget_ms has been spent, at least 3 and at most 50 times.
double MedianMs(const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) launch();
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  std::vector<float> times;
  float spent = 0;
  while (times.size() < 50 && (times.size() < 3 || (times.size() < size_t(g_min_reps) && spent < g_budget_ms) || spent < 0.25 * g_budget_ms)) {
    CHECK_CUDA(cudaEventRecord(start, g_stream));
    launch();
    CHECK_CUDA(cudaEventRecord(stop, g_stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
    spent += ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

gk::Buffers MakeBuffers(const void* a, const void* b, void* out, const Device& ws, size_t ws_bytes) {
  gk::Buffers buf;
  buf.a = a;
  buf.b = b;
  buf.out = out;
  buf.workspace = ws.ptr;
  buf.workspace_bytes = ws_bytes;
  return buf;
}

gk::LaunchContext Context() {
  gk::LaunchContext ctx;
  ctx.stream = g_stream;
  ctx.cublas = g_cublas;
  return ctx;
}

size_t MaxWorkspace(gk::Op op, const gk::Problem& p) {
  size_t bytes = 0;
  for (const gk::Variant* v : gk::DefaultRegistry().List(op, gk::Backend::kCuda))
    if (v->Supports(p.dtype)) bytes = std::max(bytes, v->WorkspaceBytes(p));
  return bytes;
}

std::string ShapeOf(const gk::Problem& p) {
  char buf[96];
  if (p.op == gk::Op::kMatMul) std::snprintf(buf, sizeof buf, "%lldx%lldx%lld", (long long)p.m, (long long)p.n, (long long)p.k);
  else std::snprintf(buf, sizeof buf, "%lldx%lld", (long long)p.m, (long long)p.n);
  return buf;
}

// ---- references ----

double MemcpyGBps() {
  const size_t bytes = size_t(1) << 30;
  Device src(bytes), dst(bytes);
  CHECK_CUDA(gb::FillUniform(src.ptr, bytes / 4, false, 7, g_stream));
  const double ms = MedianMs([&] { CHECK_CUDA(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g_stream)); });
  return 2.0 * double(bytes) / (ms * 1e6);  // read + write
}

double CublasSgemmGflops(int64_t size) {
  const size_t bytes = size_t(size * size) * 4;
  Device a(bytes), b(bytes), c(bytes);
  CHECK_CUDA(gb::FillUniform(a.ptr, size * size, false, 11, g_stream));
  CHECK_CUDA(gb::FillUniform(b.ptr, size * size, false, 12, g_stream));
  cublasSetStream(g_cublas, g_stream);
  cublasSetMathMode(g_cublas, CUBLAS_PEDANTIC_MATH);  // no TF32, no reduced-precision shortcuts
  const float one = 1, zero = 0;
  const int s = int(size);
  const double ms = MedianMs([&] {
    if (cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, static_cast<float*>(b.ptr), s,
                    static_cast<float*>(a.ptr), s, &zero, static_cast<float*>(c.ptr), s) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "cublasSgemm failed\n");
      std::exit(1);
    }
  });
  cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH);
  return 2.0 * double(size) * double(size) * double(size) / (ms * 1e6);
}

// ---- ops ----

void BenchMatMul(int64_t size, gk::DType dtype, double ref_gflops, const std::string& ref_name,
                 std::vector<Row>& rows) {
  gk::Problem p;
  p.op = gk::Op::kMatMul;
  p.dtype = dtype;
  p.m = p.n = p.k = size;
  const bool dbl = dtype == gk::DType::kFloat64;
  const size_t bytes = size_t(size * size) * size_t(gk::ElementSize(dtype));
  Device a(bytes), b(bytes), c(bytes), expect(bytes);
  const size_t ws_bytes = MaxWorkspace(p.op, p);
  Device ws(ws_bytes);
  CHECK_CUDA(gb::FillUniform(a.ptr, size * size, dbl, 21 + size, g_stream));
  CHECK_CUDA(gb::FillUniform(b.ptr, size * size, dbl, 22 + size, g_stream));
  // Expected output: cuBLAS in full precision.
  const gk::Variant* ref = gk::DefaultRegistry().Find(p.op, gk::Backend::kCuda, "cublas");
  if (!ref->launch(p, MakeBuffers(a.ptr, b.ptr, expect.ptr, ws, ws_bytes), Context()).ok()) std::exit(1);
  for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
    if (!v->Supports(dtype)) continue;
    Row row{"matmul", gk::DTypeName(dtype), ShapeOf(p), v->name};
    const gk::Buffers buf = MakeBuffers(a.ptr, b.ptr, c.ptr, ws, ws_bytes);
    CHECK_CUDA(cudaMemsetAsync(c.ptr, 0xFF, bytes, g_stream));
    const auto status = v->launch(p, buf, Context());
    double diff = 0, mag = 0;
    if (status.ok()) CHECK_CUDA(gb::MaxAbsDiff(c.ptr, expect.ptr, size * size, dbl, g_stream, &diff, &mag));
    const double err = diff / std::max(1.0, mag);
    // Both sides carry rounding error: allow the contract's tolerance.
    const double tol = v->reduced_precision ? 5e-3 : (dbl ? 1e-12 : 1e-4);
    row.ok = status.ok() && err <= tol;
    char note[96];
    std::snprintf(note, sizeof note, "err %.1e vs cuBLAS", err);
    row.note = status.ok() ? note : std::string(status.message());
    if (row.ok) {
      row.median_ms = MedianMs([&] { (void)v->launch(p, buf, Context()); });
      row.gflops = gk::UsefulFlops(p) / (row.median_ms * 1e6);
      row.gbytes = gk::MinimalBytes(p) / (row.median_ms * 1e6);
      row.reference = ref_name;
      row.reference_value = ref_gflops;
      row.ratio = row.gflops / ref_gflops;
    }
    rows.push_back(row);
  }
}

void BenchTranspose(int64_t size, gk::DType dtype, double memcpy_gbps, std::vector<Row>& rows) {
  gk::Problem p;
  p.op = gk::Op::kTranspose;
  p.dtype = dtype;
  p.m = p.n = size;
  const bool dbl = dtype == gk::DType::kFloat64;
  const size_t bytes = size_t(size * size) * size_t(gk::ElementSize(dtype));
  Device in(bytes), out(bytes), expect(bytes), ws(0);
  CHECK_CUDA(gb::FillUniform(in.ptr, size * size, dbl, 31, g_stream));
  const gk::Variant* ref = gk::DefaultRegistry().Find(p.op, gk::Backend::kCuda, "naive");
  if (!ref->launch(p, MakeBuffers(in.ptr, nullptr, expect.ptr, ws, 0), Context()).ok()) std::exit(1);
  for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
    Row row{"transpose", gk::DTypeName(dtype), ShapeOf(p), v->name};
    const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, 0);
    CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
    const auto status = v->launch(p, buf, Context());
    double diff = 0, mag = 0;
    if (status.ok()) CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, dbl, g_stream, &diff, &mag));
    row.ok = status.ok() && diff == 0;
    row.note = status.ok() ? (diff == 0 ? "exact" : "MISMATCH") : std::string(status.message());
    if (row.ok) {
      row.median_ms = MedianMs([&] { (void)v->launch(p, buf, Context()); });
      row.gbytes = gk::MinimalBytes(p) / (row.median_ms * 1e6);
      row.reference = "memcpy d2d";
      row.reference_value = memcpy_gbps;
      row.ratio = row.gbytes / memcpy_gbps;
    }
    rows.push_back(row);
  }
}

void BenchReduce(int64_t size, double cub_gbps, std::vector<Row>& rows) {
  const int64_t count = size * size;
  const size_t bytes = size_t(count) * 4;
  Device in(bytes), out(size_t(size) * 4);
  CHECK_CUDA(gb::FillUniform(in.ptr, count, false, 41, g_stream));
  std::vector<float> host(count);
  CHECK_CUDA(cudaMemcpyAsync(host.data(), in.ptr, bytes, cudaMemcpyDeviceToHost, g_stream));
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  for (gk::ReduceAxis axis : {gk::ReduceAxis::kAll, gk::ReduceAxis::kPerRow, gk::ReduceAxis::kPerColumn}) {
    gk::Problem p;
    p.op = gk::Op::kReduce;
    p.dtype = gk::DType::kFloat32;
    p.m = p.n = size;
    p.reduce_op = gk::ReduceOp::kSum;
    p.reduce_axis = axis;
    // Float64 reference sums, computed once per axis.
    std::vector<double> reference(gk::OutputElements(p), 0.0);
    for (int64_t r = 0; r < size; ++r)
      for (int64_t c = 0; c < size; ++c)
        reference[axis == gk::ReduceAxis::kAll ? 0 : axis == gk::ReduceAxis::kPerRow ? r : c] += host[r * size + c];
    const size_t ws_bytes = MaxWorkspace(p.op, p);
    Device ws(ws_bytes);
    for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
      Row row{"reduce sum " + std::string(gk::ReduceAxisName(axis)), "float32", ShapeOf(p), v->name};
      const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, ws_bytes);
      CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, size_t(size) * 4, g_stream));
      const auto status = v->launch(p, buf, Context());
      std::vector<float> got(gk::OutputElements(p));
      CHECK_CUDA(cudaMemcpyAsync(got.data(), out.ptr, got.size() * 4, cudaMemcpyDeviceToHost, g_stream));
      CHECK_CUDA(cudaStreamSynchronize(g_stream));
      const gk::CheckResult check = gk::CheckAgainstReference(p, false, host.data(), got.data(), reference);
      row.ok = status.ok() && check.ok;
      char note[96];
      std::snprintf(note, sizeof note, "err %.1e of sum|x|", check.max_rel_error);
      row.note = status.ok() ? note : std::string(status.message());
      if (row.ok) {
        row.median_ms = MedianMs([&] { (void)v->launch(p, buf, Context()); });
        row.gflops = gk::UsefulFlops(p) / (row.median_ms * 1e6);
        row.gbytes = gk::MinimalBytes(p) / (row.median_ms * 1e6);
        row.reference = "CUB sum all";
        row.reference_value = cub_gbps;
        row.ratio = row.gbytes / cub_gbps;
      }
      rows.push_back(row);
    }
  }
}

// Design choices behind register_tiled and the tiled transposes, timed here
// so that the choice can be checked: k-tile depth and resident blocks of the
// matmul, rows of threads (elements per thread) of the 32x32 transposes.
void BenchAblation(const std::map<std::string, double>& refs, std::vector<Row>& rows) {
  namespace gc = gpucompute::kernels::cuda;
  for (int64_t size : {4096, 8192}) {
    const size_t bytes = size_t(size * size) * 4;
    Device a(bytes), b(bytes), c(bytes), expect(bytes), ws(gc::kCublasWorkspaceBytes);
    CHECK_CUDA(gb::FillUniform(a.ptr, size * size, false, 61, g_stream));
    CHECK_CUDA(gb::FillUniform(b.ptr, size * size, false, 62, g_stream));
    gk::Problem p;
    p.op = gk::Op::kMatMul;
    p.m = p.n = p.k = size;
    const gk::Variant* ref = gk::DefaultRegistry().Find(p.op, gk::Backend::kCuda, "cublas");
    if (!ref->launch(p, MakeBuffers(a.ptr, b.ptr, expect.ptr, ws, gc::kCublasWorkspaceBytes), Context()).ok()) std::exit(1);
    const float* fa = static_cast<const float*>(a.ptr);
    const float* fb = static_cast<const float*>(b.ptr);
    float* fc = static_cast<float*>(c.ptr);
    for (auto [bk, min_blocks] : {std::pair{8, 2}, {8, 1}, {16, 2}, {16, 1}}) {
      Row row{"ablation matmul", "float32", ShapeOf(p),
              "rt bk" + std::to_string(bk) + " minblk" + std::to_string(min_blocks)};
      CHECK_CUDA(cudaMemsetAsync(c.ptr, 0xFF, bytes, g_stream));
      CHECK_CUDA(gc::LaunchRegisterTiledMatMulConfig<float>(fa, fb, fc, size, size, size, bk, min_blocks, g_stream));
      double diff = 0, mag = 0;
      CHECK_CUDA(gb::MaxAbsDiff(c.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
      row.ok = diff / std::max(1.0, mag) <= 1e-4;
      row.note = row.ok ? "ok vs cuBLAS" : "MISMATCH";
      if (row.ok) {
        row.median_ms = MedianMs([&] { (void)gc::LaunchRegisterTiledMatMulConfig<float>(fa, fb, fc, size, size, size, bk, min_blocks, g_stream); });
        row.gflops = gk::UsefulFlops(p) / (row.median_ms * 1e6);
        row.reference = "cuBLAS FP32";
        row.reference_value = refs.at("cublas_sgemm_gflops_" + std::to_string(size));
        row.ratio = row.gflops / row.reference_value;
      }
      rows.push_back(row);
    }
  }
  const int64_t size = 16384;
  const size_t bytes = size_t(size * size) * 4;
  Device in(bytes), out(bytes), expect(bytes);
  CHECK_CUDA(gb::FillUniform(in.ptr, size * size, false, 63, g_stream));
  const float* src = static_cast<const float*>(in.ptr);
  CHECK_CUDA(gc::LaunchTranspose<float>(src, static_cast<float*>(expect.ptr), size, size, gc::TransposeKind::kNaive, g_stream));
  gk::Problem p;
  p.op = gk::Op::kTranspose;
  p.m = p.n = size;
  for (auto [kind, name] : {std::pair{gc::TransposeKind::kSharedPadded, "shared_padded"},
                            {gc::TransposeKind::kSharedSwizzled, "shared_swizzled"}}) {
    for (int block_rows : {8, 4, 2}) {
      Row row{"ablation transpose", "float32", ShapeOf(p), std::string(name) + " rows" + std::to_string(block_rows)};
      CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
      float* dst = static_cast<float*>(out.ptr);
      CHECK_CUDA(gc::LaunchTransposeConfig<float>(src, dst, size, size, kind, block_rows, g_stream));
      double diff = 0, mag = 0;
      CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
      row.ok = diff == 0;
      row.note = row.ok ? "exact" : "MISMATCH";
      if (row.ok) {
        row.median_ms = MedianMs([&] { (void)gc::LaunchTransposeConfig<float>(src, dst, size, size, kind, block_rows, g_stream); });
        row.gbytes = gk::MinimalBytes(p) / (row.median_ms * 1e6);
        row.reference = "memcpy d2d";
        row.reference_value = refs.at("memcpy_d2d_gbps");
        row.ratio = row.gbytes / row.reference_value;
      }
      rows.push_back(row);
    }
  }
  for (auto [tx, ty, block_rows] : {std::tuple{2, 1, 8}, {1, 2, 8}, {2, 2, 8}, {2, 2, 16}}) {
    Row row{"ablation transpose", "float32", ShapeOf(p),
            "padded " + std::to_string(32 * ty) + "x" + std::to_string(32 * tx + 1) + " rows" + std::to_string(block_rows)};
    CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
    float* dst = static_cast<float*>(out.ptr);
    CHECK_CUDA(gc::LaunchWideTransposeConfig<float>(src, dst, size, size, tx, ty, block_rows, g_stream));
    double diff = 0, mag = 0;
    CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
    row.ok = diff == 0;
    row.note = row.ok ? "exact" : "MISMATCH";
    if (row.ok) {
      row.median_ms = MedianMs([&] { (void)gc::LaunchWideTransposeConfig<float>(src, dst, size, size, tx, ty, block_rows, g_stream); });
      row.gbytes = gk::MinimalBytes(p) / (row.median_ms * 1e6);
      row.reference = "memcpy d2d";
      row.reference_value = refs.at("memcpy_d2d_gbps");
      row.ratio = row.gbytes / row.reference_value;
    }
    rows.push_back(row);
  }
}

const Row* Find(const std::vector<Row>& rows, const std::string& op, const std::string& shape,
                const std::string& variant) {
  for (const Row& r : rows)
    if (r.op == op && r.shape == shape && r.variant == variant && r.ok) return &r;
  return nullptr;
}

const Row* Best(const std::vector<Row>& rows, const std::string& op, const std::string& shape,
                const std::string& exclude = "") {
  const Row* best = nullptr;
  for (const Row& r : rows)
    if (r.op == op && r.shape == shape && r.ok && r.variant != exclude && (!best || r.ratio > best->ratio)) best = &r;
  return best;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (arg == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (quick) g_min_reps = 3, g_budget_ms = 50;
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "gpucompute-bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  if (cublasCreate(&g_cublas) != CUBLAS_STATUS_SUCCESS) return 1;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("device: %s, %d SMs, %.0f MB L2, driver %d, runtime %d\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, driver, runtime);

  std::map<std::string, double> refs;
  refs["memcpy_d2d_gbps"] = MemcpyGBps();
  for (int64_t s : {1024, 4096, 8192}) refs["cublas_sgemm_gflops_" + std::to_string(s)] = CublasSgemmGflops(s);
  const int64_t reduce_size = 16384;
  {
    Device data(size_t(reduce_size * reduce_size) * 4);
    CHECK_CUDA(gb::FillUniform(data.ptr, reduce_size * reduce_size, false, 51, g_stream));
    double ms = 0;
    float sum = 0;
    CHECK_CUDA(gb::TimeCubSum(static_cast<const float*>(data.ptr), reduce_size * reduce_size, 20, g_stream, &ms, &sum));
    refs["cub_sum_gbps"] = double(reduce_size * reduce_size) * 4 / (ms * 1e6);
  }
  std::printf("references: memcpy d2d %.0f GB/s (read+write), cuBLAS FP32 (pedantic, no TF32) "
              "%.0f / %.0f / %.0f GFLOP/s at 1024/4096/8192, CUB sum %.0f GB/s (read)\n",
              refs["memcpy_d2d_gbps"], refs["cublas_sgemm_gflops_1024"], refs["cublas_sgemm_gflops_4096"],
              refs["cublas_sgemm_gflops_8192"], refs["cub_sum_gbps"]);
  std::fflush(stdout);

  std::vector<Row> rows;
  for (int64_t s : {1024, 4096, 8192}) {
    BenchMatMul(s, gk::DType::kFloat32, refs["cublas_sgemm_gflops_" + std::to_string(s)], "cuBLAS FP32", rows);
  }
  {
    // FP64 is compared with DGEMM through the cublas variant, measured here.
    std::vector<Row> f64;
    BenchMatMul(4096, gk::DType::kFloat64, 1, "", f64);
    const Row* dgemm = Find(f64, "matmul", "4096x4096x4096", "cublas");
    for (Row& r : f64) {
      if (r.ok && dgemm) {
        r.reference = "cuBLAS DGEMM";
        r.reference_value = dgemm->gflops;
        r.ratio = r.gflops / dgemm->gflops;
      }
      rows.push_back(r);
    }
  }
  BenchTranspose(16384, gk::DType::kFloat32, refs["memcpy_d2d_gbps"], rows);
  BenchTranspose(8192, gk::DType::kFloat64, refs["memcpy_d2d_gbps"], rows);
  BenchReduce(reduce_size, refs["cub_sum_gbps"], rows);
  BenchAblation(refs, rows);

  std::printf("\n%-22s %-8s %-16s %-20s %10s %10s %9s  %-13s %9s %6s  %s\n", "op", "dtype", "shape",
              "variant", "median_ms", "GFLOP/s", "GB/s", "reference", "ref", "ratio", "check");
  bool all_ok = true;
  for (const Row& r : rows) {
    all_ok = all_ok && r.ok;
    std::printf("%-22s %-8s %-16s %-20s %10.4f %10.0f %9.0f  %-13s %9.0f %6.3f  %s%s\n", r.op.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.variant.c_str(), r.median_ms, r.gflops, r.gbytes,
                r.reference.c_str(), r.reference_value, r.ratio, r.ok ? "ok " : "FAILED ", r.note.c_str());
  }

  // The targets, as ratios from this run.
  struct Target {
    std::string name;
    double value, goal;
  };
  std::vector<Target> targets;
  auto ratio = [&](const Row* r) { return r ? r->ratio : 0.0; };
  for (const char* shape : {"4096x4096x4096", "8192x8192x8192"}) {
    targets.push_back({std::string("register_tiled / cuBLAS FP32 at ") + shape,
                       ratio(Find(rows, "matmul", shape, "register_tiled")), 0.80});
    targets.push_back({std::string("tiled32 / cuBLAS FP32 at ") + shape,
                       ratio(Find(rows, "matmul", shape, "tiled32")), 0});
  }
  const Row* padded = Find(rows, "transpose", "16384x16384", "shared_padded");
  const Row* shared = Find(rows, "transpose", "16384x16384", "shared");
  targets.push_back({"transpose shared_padded / memcpy at 16384^2", ratio(padded), 0.90});
  const Row* best_t = Best(rows, "transpose", "16384x16384");
  targets.push_back({"best transpose (" + (best_t ? best_t->variant : std::string("-")) + ") / memcpy", ratio(best_t), 0.95});
  targets.push_back({"transpose shared / shared_padded (bank conflicts)",
                     shared && padded ? shared->gbytes / padded->gbytes : 0.0, 0});
  targets.push_back({"reduce warp_shuffle SUM ALL / CUB at 2^28",
                     ratio(Find(rows, "reduce sum all", "16384x16384", "warp_shuffle")), 0.97});
  for (const char* axis : {"per_row", "per_column"}) {
    const std::string op = std::string("reduce sum ") + axis;
    const Row* best = Best(rows, op, "16384x16384", "cub");
    const Row* cub = Find(rows, op, "16384x16384", "cub");
    targets.push_back({"best " + std::string(axis) + " SUM (" + (best ? best->variant : std::string("-")) +
                           ") / CUB ALL", ratio(best), 0.85});
    targets.push_back({"cub " + std::string(axis) + " SUM / CUB ALL", ratio(cub), 0});
  }
  std::printf("\n%-58s %7s %7s\n", "target", "ratio", "goal");
  for (const Target& t : targets) {
    if (t.goal > 0) std::printf("%-58s %7.3f %7.2f  %s\n", t.name.c_str(), t.value, t.goal, t.value >= t.goal ? "met" : "MISSED");
    else std::printf("%-58s %7.3f %7s\n", t.name.c_str(), t.value, "-");
  }

  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
    std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"references\": {", JsonEscape(prop.name).c_str(), prop.multiProcessorCount);
    bool first = true;
    for (const auto& [k, v] : refs) {
      std::fprintf(f, "%s\n    \"%s\": %.3f", first ? "" : ",", k.c_str(), v);
      first = false;
    }
    std::fprintf(f, "\n  },\n  \"rows\": [");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f, "%s\n    {\"op\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"variant\": \"%s\", "
                   "\"ok\": %s, \"median_ms\": %.6f, \"gflops\": %.3f, \"gbytes_per_s\": %.3f, "
                   "\"reference\": \"%s\", \"reference_value\": %.3f, \"ratio\": %.4f, \"note\": \"%s\"}",
                   i ? "," : "", r.op.c_str(), r.dtype.c_str(), r.shape.c_str(), r.variant.c_str(),
                   r.ok ? "true" : "false", r.median_ms, r.gflops, r.gbytes, r.reference.c_str(),
                   r.reference_value, r.ratio, JsonEscape(r.note).c_str());
    }
    std::fprintf(f, "\n  ],\n  \"targets\": [");
    for (size_t i = 0; i < targets.size(); ++i) {
      std::fprintf(f, "%s\n    {\"name\": \"%s\", \"ratio\": %.4f, \"goal\": %.2f}", i ? "," : "",
                   JsonEscape(targets[i].name).c_str(), targets[i].value, targets[i].goal);
    }
    std::fprintf(f, "\n  ]\n}\n");
    std::fclose(f);
  }
  cublasDestroy(g_cublas);
  cudaStreamDestroy(g_stream);
  return all_ok ? 0 : 1;
}
