// gpucompute-bench: runs every registered CUDA variant at the standard sizes
// in one process and prints one table, each figure beside a reference
// measured in the same run (device-to-device memcpy, cuBLAS FP32 without
// TF32, CUB). Every variant's output is checked before it is timed. Timings
// are medians of CUDA-event measurements after warm-up.
//   gpucompute-bench [--json FILE] [--ceilings_out FILE] [--quick]
// --ceilings_out writes the reference figures as a ceilings file for
// gpucompute-server --ceilings (proto/gpucompute/tools/v1/ceilings.proto).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bench_device.h"
#include "check_cuda.h"
#include "cuda/matmul/matmul_kernels.h"
#include "cuda/transpose/transpose_kernels.h"
#include "google/protobuf/util/json_util.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/cuda_timer.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "gpucompute/tools/v1/bench_report.pb.h"
#include "gpucompute/tools/v1/ceilings.pb.h"

namespace gk = gpucompute::kernels;
namespace gc = gpucompute::kernels::cuda;
namespace gb = gpucompute::bench;

namespace {

using Report = gpucompute::tools::v1::BenchReport;
using Row = Report::Row;

Row NewRow(const std::string& op, const std::string& dtype, const std::string& shape,
           const std::string& variant) {
  Row row;
  row.set_op(op);
  row.set_dtype(dtype);
  row.set_shape(shape);
  row.set_variant(variant);
  return row;
}

// Exits the bench with the failure's message.
void CheckOk(const absl::Status& status) {
  if (!status.ok()) {
    std::fprintf(stderr, "gpucompute-bench: %s\n", std::string(status.message()).c_str());
    std::exit(1);
  }
}

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

// Median milliseconds of `launch` (kernels::TimeLaunches: CUDA events on
// g_stream), after two warm-ups; repeats until about g_budget_ms has been
// spent, at least 3 and at most 50 times. Exits on a failed launch.
double MedianMs(const std::function<absl::Status()>& launch) {
  absl::StatusOr<gc::EventTimer> timer = gc::EventTimer::Create();
  CheckOk(timer.status());
  CheckOk(gc::TimeLaunches(*timer, g_stream, 2, 0, launch).status());
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  std::vector<double> times;
  double spent = 0;
  while (times.size() < 50 &&
         (times.size() < 3 || (times.size() < size_t(g_min_reps) && spent < g_budget_ms) ||
          spent < 0.25 * g_budget_ms)) {
    absl::StatusOr<std::vector<double>> ms = gc::TimeLaunches(*timer, g_stream, 0, 1, launch);
    CheckOk(ms.status());
    times.push_back(ms->front());
    spent += ms->front();
  }
  return gpucompute::common::Median(times);
}

gk::Buffers MakeBuffers(const void* a, const void* b, void* out, const Device& ws,
                        size_t ws_bytes) {
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

// The CUDA variant of `op` that plays `role` (the reference, the flagship,
// ...), as its ladder row says: the bench names no variant itself.
const gk::Variant& WithRole(gk::Op op, gk::VariantRole role) {
  const gk::Variant* v = gk::DefaultRegistry().WithRole(op, gk::Backend::kCuda, role);
  if (v == nullptr) {
    std::fprintf(stderr, "no %s variant plays role %d\n", gk::OpName(op), static_cast<int>(role));
    std::exit(1);
  }
  return *v;
}

size_t MaxWorkspace(gk::Op op, const gk::Problem& p) {
  size_t bytes = 0;
  for (const gk::Variant* v : gk::DefaultRegistry().List(op, gk::Backend::kCuda))
    if (v->Supports(p.dtype)) bytes = std::max(bytes, v->WorkspaceBytes(p));
  return bytes;
}

std::string ShapeOf(const gk::Problem& p) {
  char buf[96];
  if (p.op == gk::Op::kMatMul)
    std::snprintf(buf, sizeof buf, "%lldx%lldx%lld", (long long)p.m, (long long)p.n,
                  (long long)p.k);
  else
    std::snprintf(buf, sizeof buf, "%lldx%lld", (long long)p.m, (long long)p.n);
  return buf;
}

// ---- references ----

double MemcpyGBps() {
  const size_t bytes = size_t(1) << 30;
  Device src(bytes), dst(bytes);
  CHECK_CUDA(gb::FillUniform(src.ptr, bytes / 4, false, 7, g_stream));
  const double ms = MedianMs([&] {
    return gc::CudaStatus(
        cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g_stream),
        "cudaMemcpyAsync");
  });
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
    return gc::CublasStatus(
        cublasSgemm(g_cublas, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, static_cast<float*>(b.ptr),
                    s, static_cast<float*>(a.ptr), s, &zero, static_cast<float*>(c.ptr), s),
        "cublasSgemm");
  });
  cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH);
  return 2.0 * double(size) * double(size) * double(size) / (ms * 1e6);
}

// GB/s read by cub::DeviceReduce::Sum over `count` floats: 20 timed runs
// after 3 warm-ups.
double CubSumGBps(int64_t count) {
  Device data(size_t(count) * 4), sum(sizeof(float));
  CHECK_CUDA(gb::FillUniform(data.ptr, count, false, 51, g_stream));
  size_t scratch_bytes = 0;
  CHECK_CUDA(gb::CubSumScratchBytes(count, &scratch_bytes));
  Device scratch(scratch_bytes);
  absl::StatusOr<gc::EventTimer> timer = gc::EventTimer::Create();
  CheckOk(timer.status());
  absl::StatusOr<std::vector<double>> ms = gc::TimeLaunches(*timer, g_stream, 3, 20, [&] {
    return gc::CudaStatus(gb::CubSum(static_cast<const float*>(data.ptr), count, scratch.ptr,
                                     scratch_bytes, static_cast<float*>(sum.ptr), g_stream),
                          "cub::DeviceReduce::Sum");
  });
  CheckOk(ms.status());
  return double(count) * 4 / (gpucompute::common::Median(*ms) * 1e6);
}

// Whether a row's ratio compares GFLOP/s or GB/s with its reference.
enum class Rate { kFlops, kBytes };

// Times `launch` (MedianMs) for a row whose output checked out, and sets its
// rates and their ratio to `reference_value`, measured in the same run.
void TimeRow(Row& row, const gk::Problem& p, Rate rate, const std::string& reference,
             double reference_value, const std::function<absl::Status()>& launch) {
  const double ms = MedianMs(launch);
  row.set_median_ms(ms);
  row.set_gflops(gk::UsefulFlops(p) / (ms * 1e6));
  row.set_gbytes_per_s(gk::MinimalBytes(p) / (ms * 1e6));
  row.set_reference(reference);
  row.set_reference_value(reference_value);
  row.set_ratio((rate == Rate::kFlops ? row.gflops() : row.gbytes_per_s()) / reference_value);
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
  const gk::Variant* ref = &WithRole(p.op, gk::VariantRole::kVendorReference);
  if (!ref->launch(p, MakeBuffers(a.ptr, b.ptr, expect.ptr, ws, ws_bytes), Context()).ok())
    std::exit(1);
  for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
    if (!v->Supports(dtype)) continue;
    Row row = NewRow("matmul", gk::DTypeName(dtype), ShapeOf(p), v->name);
    const gk::Buffers buf = MakeBuffers(a.ptr, b.ptr, c.ptr, ws, ws_bytes);
    CHECK_CUDA(cudaMemsetAsync(c.ptr, 0xFF, bytes, g_stream));
    const auto status = v->launch(p, buf, Context());
    double diff = 0, mag = 0;
    if (status.ok())
      CHECK_CUDA(gb::MaxAbsDiff(c.ptr, expect.ptr, size * size, dbl, g_stream, &diff, &mag));
    const double err = diff / std::max(1.0, mag);
    // Both sides carry rounding error: allow the contract's tolerance.
    const double tol = v->reduced_precision ? 5e-3 : (dbl ? 1e-12 : 1e-4);
    row.set_ok(status.ok() && err <= tol);
    char note[96];
    std::snprintf(note, sizeof note, "err %.1e vs cuBLAS", err);
    row.set_note(status.ok() ? note : std::string(status.message()));
    if (row.ok()) {
      TimeRow(row, p, Rate::kFlops, ref_name, ref_gflops,
              [&] { return v->launch(p, buf, Context()); });
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
  // Transposing is exact: the simplest kernel's result is the expected one.
  const gk::Variant* ref = &WithRole(p.op, gk::VariantRole::kTextbook);
  if (!ref->launch(p, MakeBuffers(in.ptr, nullptr, expect.ptr, ws, 0), Context()).ok())
    std::exit(1);
  for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
    Row row = NewRow("transpose", gk::DTypeName(dtype), ShapeOf(p), v->name);
    const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, 0);
    CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
    const auto status = v->launch(p, buf, Context());
    double diff = 0, mag = 0;
    if (status.ok())
      CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, dbl, g_stream, &diff, &mag));
    row.set_ok(status.ok() && diff == 0);
    row.set_note(status.ok() ? (diff == 0 ? "exact" : "MISMATCH") : std::string(status.message()));
    if (row.ok()) {
      TimeRow(row, p, Rate::kBytes, "memcpy d2d", memcpy_gbps,
              [&] { return v->launch(p, buf, Context()); });
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
  for (gk::ReduceAxis axis :
       {gk::ReduceAxis::kAll, gk::ReduceAxis::kPerRow, gk::ReduceAxis::kPerColumn}) {
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
        reference[axis == gk::ReduceAxis::kAll      ? 0
                  : axis == gk::ReduceAxis::kPerRow ? r
                                                    : c] += host[r * size + c];
    const size_t ws_bytes = MaxWorkspace(p.op, p);
    Device ws(ws_bytes);
    for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
      Row row = NewRow("reduce sum " + std::string(gk::ReduceAxisName(axis)), "float32", ShapeOf(p),
                       v->name);
      const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, ws_bytes);
      CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, size_t(size) * 4, g_stream));
      const auto status = v->launch(p, buf, Context());
      std::vector<float> got(gk::OutputElements(p));
      CHECK_CUDA(
          cudaMemcpyAsync(got.data(), out.ptr, got.size() * 4, cudaMemcpyDeviceToHost, g_stream));
      CHECK_CUDA(cudaStreamSynchronize(g_stream));
      const gk::CheckResult check =
          gk::CheckAgainstReference(p, false, host.data(), got.data(), reference);
      row.set_ok(status.ok() && check.ok);
      char note[96];
      std::snprintf(note, sizeof note, "err %.1e of sum|x|", check.max_rel_error);
      row.set_note(status.ok() ? note : std::string(status.message()));
      if (row.ok()) {
        TimeRow(row, p, Rate::kBytes, "CUB sum all", cub_gbps,
                [&] { return v->launch(p, buf, Context()); });
      }
      rows.push_back(row);
    }
  }
}

// Design choices behind register_tiled and the tiled transposes, timed here
// so that the choice can be checked: k-tile depth and resident blocks of the
// matmul, rows of threads (elements per thread) of the 32x32 transposes.
void BenchAblation(const std::map<std::string, double>& refs, std::vector<Row>& rows) {
  for (int64_t size : {4096, 8192}) {
    const size_t bytes = size_t(size * size) * 4;
    Device a(bytes), b(bytes), c(bytes), expect(bytes), ws(gc::kCublasWorkspaceBytes);
    CHECK_CUDA(gb::FillUniform(a.ptr, size * size, false, 61, g_stream));
    CHECK_CUDA(gb::FillUniform(b.ptr, size * size, false, 62, g_stream));
    gk::Problem p;
    p.op = gk::Op::kMatMul;
    p.m = p.n = p.k = size;
    const gk::Variant* ref = &WithRole(p.op, gk::VariantRole::kVendorReference);
    if (!ref->launch(p, MakeBuffers(a.ptr, b.ptr, expect.ptr, ws, gc::kCublasWorkspaceBytes),
                     Context())
             .ok())
      std::exit(1);
    const float* fa = static_cast<const float*>(a.ptr);
    const float* fb = static_cast<const float*>(b.ptr);
    float* fc = static_cast<float*>(c.ptr);
    for (auto [bk, min_blocks] : {std::pair{8, 2}, {8, 1}, {16, 2}, {16, 1}}) {
      Row row = NewRow("ablation matmul", "float32", ShapeOf(p),
                       "rt bk" + std::to_string(bk) + " minblk" + std::to_string(min_blocks));
      CHECK_CUDA(cudaMemsetAsync(c.ptr, 0xFF, bytes, g_stream));
      CHECK_CUDA(gc::LaunchRegisterTiledMatMulConfig<float>(fa, fb, fc, size, size, size, bk,
                                                            min_blocks, g_stream));
      double diff = 0, mag = 0;
      CHECK_CUDA(gb::MaxAbsDiff(c.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
      row.set_ok(diff / std::max(1.0, mag) <= 1e-4);
      row.set_note(row.ok() ? "ok vs cuBLAS" : "MISMATCH");
      if (row.ok()) {
        TimeRow(row, p, Rate::kFlops, "cuBLAS FP32",
                refs.at("cublas_sgemm_gflops_" + std::to_string(size)), [&] {
                  return gc::CudaStatus(gc::LaunchRegisterTiledMatMulConfig<float>(
                                            fa, fb, fc, size, size, size, bk, min_blocks, g_stream),
                                        "register_tiled configuration");
                });
      }
      rows.push_back(row);
    }
  }
  const int64_t size = 16384;
  const size_t bytes = size_t(size * size) * 4;
  Device in(bytes), out(bytes), expect(bytes);
  CHECK_CUDA(gb::FillUniform(in.ptr, size * size, false, 63, g_stream));
  const float* src = static_cast<const float*>(in.ptr);
  CHECK_CUDA(gc::LaunchTranspose<float>(src, static_cast<float*>(expect.ptr), size, size,
                                        gc::TransposeKind::kNaive, g_stream));
  gk::Problem p;
  p.op = gk::Op::kTranspose;
  p.m = p.n = size;
  for (gc::TransposeKind kind :
       {gc::TransposeKind::kSharedPadded, gc::TransposeKind::kSharedSwizzled}) {
    const char* name = gc::TransposeKindVariant(kind);
    for (int block_rows : {8, 4, 2}) {
      Row row = NewRow("ablation transpose", "float32", ShapeOf(p),
                       std::string(name) + " rows" + std::to_string(block_rows));
      CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
      float* dst = static_cast<float*>(out.ptr);
      CHECK_CUDA(
          gc::LaunchTransposeConfig<float>(src, dst, size, size, kind, block_rows, g_stream));
      double diff = 0, mag = 0;
      CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
      row.set_ok(diff == 0);
      row.set_note(row.ok() ? "exact" : "MISMATCH");
      if (row.ok()) {
        TimeRow(row, p, Rate::kBytes, "memcpy d2d", refs.at("memcpy_d2d_gbps"), [&] {
          return gc::CudaStatus(
              gc::LaunchTransposeConfig<float>(src, dst, size, size, kind, block_rows, g_stream),
              "transpose configuration");
        });
      }
      rows.push_back(row);
    }
  }
  for (auto [tx, ty, block_rows] : {std::tuple{2, 1, 8}, {1, 2, 8}, {2, 2, 8}, {2, 2, 16}}) {
    Row row = NewRow("ablation transpose", "float32", ShapeOf(p),
                     "padded " + std::to_string(32 * ty) + "x" + std::to_string(32 * tx + 1) +
                         " rows" + std::to_string(block_rows));
    CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
    float* dst = static_cast<float*>(out.ptr);
    CHECK_CUDA(
        gc::LaunchWideTransposeConfig<float>(src, dst, size, size, tx, ty, block_rows, g_stream));
    double diff = 0, mag = 0;
    CHECK_CUDA(gb::MaxAbsDiff(out.ptr, expect.ptr, size * size, false, g_stream, &diff, &mag));
    row.set_ok(diff == 0);
    row.set_note(row.ok() ? "exact" : "MISMATCH");
    if (row.ok()) {
      TimeRow(row, p, Rate::kBytes, "memcpy d2d", refs.at("memcpy_d2d_gbps"), [&] {
        return gc::CudaStatus(gc::LaunchWideTransposeConfig<float>(src, dst, size, size, tx, ty,
                                                                   block_rows, g_stream),
                              "wide transpose configuration");
      });
    }
    rows.push_back(row);
  }
}

// ---- 16-bit Transpose and Reduce ----
// FP16 and BF16 rows beside references measured here on the same bytes:
// device memcpy of the 2^28 x 2 bytes for the transposes, CUB's float sum
// over 2^27 floats for the reductions; plus the 2-byte tiled transposes'
// ablation (one element per shared access against 2x2 blocks as words,
// padding, swizzle, tile sizes).

// 16-bit finite values in (-1, 1), of every magnitude down to 2^-14 (the
// exponent field 0-14 for FP16, 113-126 for BF16), from a hash: made on the
// host, as bench_device has no 16-bit fill.
std::vector<uint16_t> Random16(gk::DType dtype, int64_t count, uint64_t seed) {
  std::vector<uint16_t> out(static_cast<size_t>(count));
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (uint16_t& v : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint32_t r = uint32_t(x);
    if (dtype == gk::DType::kFloat16)
      v = uint16_t((r & 0x83ffu) | (((r >> 16) % 15u) << 10));
    else
      v = uint16_t((r & 0x807fu) | ((113u + (r >> 16) % 14u) << 7));
  }
  return out;
}

// GB/s (read + write) of cudaMemcpyAsync device to device of `bytes`.
double MemcpyGBpsOf(size_t bytes) {
  Device src(bytes), dst(bytes);
  CHECK_CUDA(cudaMemsetAsync(src.ptr, 0x3c, bytes, g_stream));
  const double ms = MedianMs([&] {
    return gc::CudaStatus(
        cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g_stream),
        "cudaMemcpyAsync");
  });
  return 2.0 * double(bytes) / (ms * 1e6);
}

std::vector<uint16_t> Download16(const Device& d, size_t count) {
  std::vector<uint16_t> out(count);
  CHECK_CUDA(cudaMemcpyAsync(out.data(), d.ptr, count * 2, cudaMemcpyDeviceToHost, g_stream));
  CHECK_CUDA(cudaStreamSynchronize(g_stream));
  return out;
}

void BenchHalfTranspose(int64_t size, gk::DType dtype, double memcpy_gbps, std::vector<Row>& rows) {
  gk::Problem p;
  p.op = gk::Op::kTranspose;
  p.dtype = dtype;
  p.m = p.n = size;
  const size_t count = size_t(size * size), bytes = count * 2;
  const std::vector<uint16_t> host = Random16(dtype, int64_t(count), 71);
  std::vector<uint16_t> expect(count);
  for (int64_t r = 0; r < size; ++r)
    for (int64_t c = 0; c < size; ++c) expect[c * size + r] = host[r * size + c];
  Device in(bytes), out(bytes), ws(0);
  CHECK_CUDA(cudaMemcpyAsync(in.ptr, host.data(), bytes, cudaMemcpyHostToDevice, g_stream));
  // Checks `launch`'s output against the host transpose, bit for bit, and
  // times it.
  auto row_of = [&](const std::string& op, const std::string& name,
                    const std::function<absl::Status()>& launch) {
    Row row = NewRow(op, gk::DTypeName(dtype), ShapeOf(p), name);
    CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, bytes, g_stream));
    const absl::Status status = launch();
    const bool exact = status.ok() && Download16(out, count) == expect;
    row.set_ok(exact);
    row.set_note(status.ok() ? (exact ? "exact" : "MISMATCH") : std::string(status.message()));
    if (row.ok()) TimeRow(row, p, Rate::kBytes, "memcpy same bytes", memcpy_gbps, launch);
    rows.push_back(row);
  };
  const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, 0);
  for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
    if (!v->Supports(dtype)) continue;
    row_of("transpose", v->name, [&] { return v->launch(p, buf, Context()); });
  }
  if (dtype != gk::DType::kFloat16) return;  // the ablation moves bits: once is enough
  const auto* src = static_cast<const uint16_t*>(in.ptr);
  auto* dst = static_cast<uint16_t*>(out.ptr);
  for (int i = 0; gc::Transpose16AblationName(i) != nullptr; ++i) {
    row_of("ablation transpose16", gc::Transpose16AblationName(i), [&] {
      return gc::CudaStatus(gc::LaunchTranspose16Ablation(i, src, dst, size, size, g_stream),
                            "2-byte transpose configuration");
    });
  }
}

void BenchHalfReduce(int64_t size, gk::DType dtype, double cub_gbps, std::vector<Row>& rows) {
  const int64_t count = size * size;
  const std::vector<uint16_t> host = Random16(dtype, count, 81);
  Device in(size_t(count) * 2), out(size_t(size) * 4);
  CHECK_CUDA(
      cudaMemcpyAsync(in.ptr, host.data(), size_t(count) * 2, cudaMemcpyHostToDevice, g_stream));
  for (auto [axis, f32] : {std::pair{gk::ReduceAxis::kAll, false},
                           {gk::ReduceAxis::kAll, true},
                           {gk::ReduceAxis::kPerRow, false},
                           {gk::ReduceAxis::kPerColumn, false}}) {
    gk::Problem p;
    p.op = gk::Op::kReduce;
    p.dtype = dtype;
    p.float32_output = f32;
    p.m = p.n = size;
    p.reduce_op = gk::ReduceOp::kSum;
    p.reduce_axis = axis;
    const std::vector<double> reference = gk::ReferenceResult(p, host.data(), nullptr);
    const size_t ws_bytes = MaxWorkspace(p.op, p);
    Device ws(ws_bytes);
    const size_t out_bytes = size_t(gk::OutputBytes(p));
    for (const gk::Variant* v : gk::DefaultRegistry().List(p.op, gk::Backend::kCuda)) {
      if (!v->Supports(dtype)) continue;
      Row row =
          NewRow("reduce sum " + std::string(gk::ReduceAxisName(axis)) + (f32 ? " ->f32" : ""),
                 gk::DTypeName(dtype), ShapeOf(p), v->name);
      const gk::Buffers buf = MakeBuffers(in.ptr, nullptr, out.ptr, ws, ws_bytes);
      CHECK_CUDA(cudaMemsetAsync(out.ptr, 0xFF, out_bytes, g_stream));
      const auto status = v->launch(p, buf, Context());
      std::vector<char> got(out_bytes);
      CHECK_CUDA(cudaMemcpyAsync(got.data(), out.ptr, out_bytes, cudaMemcpyDeviceToHost, g_stream));
      CHECK_CUDA(cudaStreamSynchronize(g_stream));
      const gk::CheckResult check =
          gk::CheckAgainstReference(p, false, host.data(), got.data(), reference);
      row.set_ok(status.ok() && check.ok);
      char note[96];
      std::snprintf(note, sizeof note, "err %.1e of the contract's scale", check.max_rel_error);
      row.set_note(status.ok() ? note : std::string(status.message()));
      if (row.ok()) {
        TimeRow(row, p, Rate::kBytes, "CUB f32 same bytes", cub_gbps,
                [&] { return v->launch(p, buf, Context()); });
      }
      rows.push_back(row);
    }
  }
}

// The 16-bit rows and their references (refs: "memcpy_d2d_gbps_16384sq_2B",
// "cub_sum_gbps_2^27_floats").
void BenchHalf(std::map<std::string, double>& refs, std::vector<Row>& rows) {
  const int64_t size = 16384;
  refs["memcpy_d2d_gbps_16384sq_2B"] = MemcpyGBpsOf(size_t(size * size) * 2);
  refs["cub_sum_gbps_2^27_floats"] = CubSumGBps(size * size / 2);
  std::printf(
      "16-bit references: memcpy d2d of 512 MiB %.0f GB/s, CUB float sum of 512 MiB %.0f "
      "GB/s\n",
      refs["memcpy_d2d_gbps_16384sq_2B"], refs["cub_sum_gbps_2^27_floats"]);
  std::fflush(stdout);
  for (gk::DType dtype : {gk::DType::kFloat16, gk::DType::kBFloat16}) {
    BenchHalfTranspose(size, dtype, refs["memcpy_d2d_gbps_16384sq_2B"], rows);
    BenchHalfReduce(size, dtype, refs["cub_sum_gbps_2^27_floats"], rows);
  }
}

// The 16-bit targets: the best transpose against memcpy, the best SUM ALL
// against CUB's float sum on the same bytes, and the cub variant's own.
void HalfTargets(const std::vector<Row>& rows,
                 const std::function<void(const std::string&, double, double)>& target) {
  const std::string cub = WithRole(gk::Op::kReduce, gk::VariantRole::kVendorReference).name;
  for (const char* dtype : {"float16", "bfloat16"}) {
    const Row* best_t = nullptr;
    const Row* best_r = nullptr;
    const Row* cub_r = nullptr;
    for (const Row& r : rows) {
      if (r.dtype() != dtype || !r.ok()) continue;
      if (r.op() == "transpose" && (!best_t || r.ratio() > best_t->ratio())) best_t = &r;
      if (r.op() == "reduce sum all") {
        if (!best_r || r.ratio() > best_r->ratio()) best_r = &r;
        if (r.variant() == cub) cub_r = &r;
      }
    }
    const std::string d(dtype);
    target("best " + d + " transpose (" + (best_t ? best_t->variant() : "-") + ") / memcpy",
           best_t ? best_t->ratio() : 0, 0.93);
    target("best " + d + " SUM ALL (" + (best_r ? best_r->variant() : "-") + ") / CUB f32",
           best_r ? best_r->ratio() : 0, 0.97);
    target(cub + " " + d + " SUM ALL / CUB f32", cub_r ? cub_r->ratio() : 0, 0);
  }
}

const Row* Find(const std::vector<Row>& rows, const std::string& op, const std::string& shape,
                const std::string& variant) {
  for (const Row& r : rows)
    if (r.op() == op && r.shape() == shape && r.variant() == variant && r.ok()) return &r;
  return nullptr;
}

const Row* Best(const std::vector<Row>& rows, const std::string& op, const std::string& shape,
                const std::string& exclude = "") {
  const Row* best = nullptr;
  for (const Row& r : rows)
    if (r.op() == op && r.shape() == shape && r.ok() && r.variant() != exclude &&
        (!best || r.ratio() > best->ratio())) {
      best = &r;
    }
  return best;
}

// Writes `message` as indented JSON with the proto field names, every field
// present; false (and a line on stderr) when it cannot.
bool WriteJson(const google::protobuf::Message& message, const std::string& path) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  if (const auto s = google::protobuf::util::MessageToJsonString(message, &json, options);
      !s.ok()) {
    std::fprintf(stderr, "%s as JSON: %s\n", path.c_str(), s.ToString().c_str());
    return false;
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f || std::fwrite(json.data(), 1, json.size(), f) != json.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// --only_16bit: the 16-bit rows, their targets, and the JSON report.
bool PrintHalfOnly(const std::vector<Row>& rows, const std::string& json_path) {
  std::printf("\n%-28s %-8s %-12s %-28s %9s %9s  %-18s %6s  %s\n", "op", "dtype", "shape",
              "variant", "median_ms", "GB/s", "reference", "ratio", "check");
  bool all_ok = true;
  for (const Row& r : rows) {
    all_ok = all_ok && r.ok();
    std::printf("%-28s %-8s %-12s %-28s %9.4f %9.0f  %-18s %6.3f  %s%s\n", r.op().c_str(),
                r.dtype().c_str(), r.shape().c_str(), r.variant().c_str(), r.median_ms(),
                r.gbytes_per_s(), r.reference().c_str(), r.ratio(), r.ok() ? "ok " : "FAILED ",
                r.note().c_str());
  }
  Report report;
  std::printf("\n%-58s %7s %7s\n", "target", "ratio", "goal");
  HalfTargets(rows, [&](const std::string& name, double value, double goal) {
    Report::Target& t = *report.add_targets();
    t.set_name(name);
    t.set_ratio(value);
    t.set_goal(goal);
    std::printf("%-58s %7.3f %7.2f  %s\n", name.c_str(), value, goal,
                goal <= 0 ? "-" : (value >= goal ? "met" : "MISSED"));
  });
  if (!json_path.empty()) {
    for (const Row& r : rows) *report.add_rows() = r;
    if (!WriteJson(report, json_path)) return false;
  }
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path, ceilings_path;
  bool quick = false, only_16bit = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (arg == "--ceilings_out" && i + 1 < argc)
      ceilings_path = argv[++i];
    else if (arg == "--quick")
      quick = true;
    else if (arg == "--only_16bit")  // the FP16/BF16 transpose and reduce rows alone
      only_16bit = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--ceilings_out FILE] [--quick] [--only_16bit]\n",
                   argv[0]);
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
  if (only_16bit) {
    std::vector<Row> rows;
    BenchHalf(refs, rows);
    return PrintHalfOnly(rows, json_path) ? 0 : 1;
  }
  refs["memcpy_d2d_gbps"] = MemcpyGBps();
  for (int64_t s : {1024, 4096, 8192})
    refs["cublas_sgemm_gflops_" + std::to_string(s)] = CublasSgemmGflops(s);
  const int64_t reduce_size = 16384;
  refs["cub_sum_gbps"] = CubSumGBps(reduce_size * reduce_size);
  std::printf(
      "references: memcpy d2d %.0f GB/s (read+write), cuBLAS FP32 (pedantic, no TF32) "
      "%.0f / %.0f / %.0f GFLOP/s at 1024/4096/8192, CUB sum %.0f GB/s (read)\n",
      refs["memcpy_d2d_gbps"], refs["cublas_sgemm_gflops_1024"], refs["cublas_sgemm_gflops_4096"],
      refs["cublas_sgemm_gflops_8192"], refs["cub_sum_gbps"]);
  std::fflush(stdout);
  if (!ceilings_path.empty()) {
    // What the server measures at start-up, measured here on an idle device,
    // for gpucompute-server --ceilings (this bench runs on device 0).
    gpucompute::tools::v1::CeilingsFile file;
    auto* device = file.add_devices();
    device->set_device("cuda:0");
    device->set_gbytes_per_s(refs["memcpy_d2d_gbps"]);
    device->set_gbytes_per_s_read(refs["cub_sum_gbps"]);
    device->set_gflops(refs["cublas_sgemm_gflops_4096"]);
    if (!WriteJson(file, ceilings_path)) return 1;
    std::printf("ceilings written to %s\n", ceilings_path.c_str());
  }

  std::vector<Row> rows;
  for (int64_t s : {1024, 4096, 8192}) {
    BenchMatMul(s, gk::DType::kFloat32, refs["cublas_sgemm_gflops_" + std::to_string(s)],
                "cuBLAS FP32", rows);
  }
  {
    // FP64 is compared with DGEMM through the cublas variant, measured here.
    std::vector<Row> f64;
    BenchMatMul(4096, gk::DType::kFloat64, 1, "", f64);
    const Row* dgemm = Find(f64, "matmul", "4096x4096x4096",
                            WithRole(gk::Op::kMatMul, gk::VariantRole::kVendorReference).name);
    const double dgemm_gflops = dgemm ? dgemm->gflops() : 0;
    for (Row& r : f64) {
      if (r.ok() && dgemm_gflops > 0) {
        r.set_reference("cuBLAS DGEMM");
        r.set_reference_value(dgemm_gflops);
        r.set_ratio(r.gflops() / dgemm_gflops);
      }
      rows.push_back(r);
    }
  }
  BenchTranspose(16384, gk::DType::kFloat32, refs["memcpy_d2d_gbps"], rows);
  BenchTranspose(8192, gk::DType::kFloat64, refs["memcpy_d2d_gbps"], rows);
  BenchReduce(reduce_size, refs["cub_sum_gbps"], rows);
  BenchAblation(refs, rows);
  BenchHalf(refs, rows);

  std::printf("\n%-22s %-8s %-16s %-20s %10s %10s %9s  %-13s %9s %6s  %s\n", "op", "dtype", "shape",
              "variant", "median_ms", "GFLOP/s", "GB/s", "reference", "ref", "ratio", "check");
  bool all_ok = true;
  for (const Row& r : rows) {
    all_ok = all_ok && r.ok();
    std::printf("%-22s %-8s %-16s %-20s %10.4f %10.0f %9.0f  %-13s %9.0f %6.3f  %s%s\n",
                r.op().c_str(), r.dtype().c_str(), r.shape().c_str(), r.variant().c_str(),
                r.median_ms(), r.gflops(), r.gbytes_per_s(), r.reference().c_str(),
                r.reference_value(), r.ratio(), r.ok() ? "ok " : "FAILED ", r.note().c_str());
  }

  // The targets, as ratios from this run.
  std::vector<Report::Target> targets;
  auto target = [&](const std::string& name, double value, double goal) {
    Report::Target& t = targets.emplace_back();
    t.set_name(name);
    t.set_ratio(value);
    t.set_goal(goal);
  };
  auto ratio = [&](const Row* r) { return r ? r->ratio() : 0.0; };
  auto variant = [](const Row* r) { return r ? r->variant() : std::string("-"); };
  // Each ladder's flagship against the vendor's, and the rung below it.
  const gk::Variant& matmul = WithRole(gk::Op::kMatMul, gk::VariantRole::kFlagship);
  for (const char* shape : {"4096x4096x4096", "8192x8192x8192"}) {
    target(matmul.name + " / cuBLAS FP32 at " + shape,
           ratio(Find(rows, "matmul", shape, matmul.name)), 0.80);
    const std::string below(matmul.lesson.before);
    target(below + " / cuBLAS FP32 at " + shape, ratio(Find(rows, "matmul", shape, below)), 0);
  }
  const gk::Variant& transpose = WithRole(gk::Op::kTranspose, gk::VariantRole::kFlagship);
  const std::string unpadded(transpose.lesson.before);
  const Row* padded = Find(rows, "transpose", "16384x16384", transpose.name);
  const Row* shared = Find(rows, "transpose", "16384x16384", unpadded);
  target("transpose " + transpose.name + " / memcpy at 16384^2", ratio(padded), 0.90);
  const Row* best_t = Best(rows, "transpose", "16384x16384");
  target("best transpose (" + variant(best_t) + ") / memcpy", ratio(best_t), 0.95);
  target("transpose " + unpadded + " / " + transpose.name + " (" +
             std::string(transpose.lesson.idea) + ")",
         shared && padded ? shared->gbytes_per_s() / padded->gbytes_per_s() : 0.0, 0);
  HalfTargets(rows, target);
  const std::string reduce = WithRole(gk::Op::kReduce, gk::VariantRole::kFlagship).name;
  const std::string cub = WithRole(gk::Op::kReduce, gk::VariantRole::kVendorReference).name;
  target("reduce " + reduce + " SUM ALL / CUB at 2^28",
         ratio(Find(rows, "reduce sum all", "16384x16384", reduce)), 0.97);
  for (const char* axis : {"per_row", "per_column"}) {
    const std::string op = std::string("reduce sum ") + axis;
    const Row* best = Best(rows, op, "16384x16384", cub);
    target("best " + std::string(axis) + " SUM (" + variant(best) + ") / CUB ALL", ratio(best),
           0.85);
    target(cub + " " + axis + " SUM / CUB ALL", ratio(Find(rows, op, "16384x16384", cub)), 0);
  }
  std::printf("\n%-58s %7s %7s\n", "target", "ratio", "goal");
  for (const Report::Target& t : targets) {
    if (t.goal() > 0) {
      std::printf("%-58s %7.3f %7.2f  %s\n", t.name().c_str(), t.ratio(), t.goal(),
                  t.ratio() >= t.goal() ? "met" : "MISSED");
    } else {
      std::printf("%-58s %7.3f %7s\n", t.name().c_str(), t.ratio(), "-");
    }
  }

  if (!json_path.empty()) {
    Report report;
    report.set_device(prop.name);
    report.set_sms(prop.multiProcessorCount);
    report.mutable_references()->insert(refs.begin(), refs.end());
    for (const Row& r : rows) *report.add_rows() = r;
    for (const Report::Target& t : targets) *report.add_targets() = t;
    if (!WriteJson(report, json_path)) return 1;
  }
  cublasDestroy(g_cublas);
  cudaStreamDestroy(g_stream);
  return all_ok ? 0 : 1;
}
