// Every CUDA variant x dtype (x op x axis for reductions) against the float64
// CPU reference at odd shapes, on fresh random data (the seed is printed on
// failure), with outputs and workspace poisoned with NaN before each launch.
// Reductions are also launched twice to check that they are deterministic.
// GPUCOMPUTE_TEST_SMALL=1 keeps only small shapes (for compute-sanitizer).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int64_t m, n, k;
};

bool SmallOnly() {
  const char* v = std::getenv("GPUCOMPUTE_TEST_SMALL");
  return v != nullptr && std::string(v) == "1";
}

std::vector<Shape> MatMulShapes() {
  std::vector<Shape> all = {{1, 1, 1},       {1, 300, 17},   {300, 1, 17},    {31, 33, 17},
                            {33, 31, 1},     {64, 64, 64},   {130, 129, 131}, {132, 260, 36},
                            {256, 256, 128}, {257, 255, 8},  {64, 96, 2048},  {1000, 1001, 67},
                            {4097, 513, 9},  {129, 4097, 33}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (!SmallOnly() || s.m * s.n * s.k <= 600000) out.push_back(s);
  return out;
}

std::vector<Shape> MatrixShapes() {
  std::vector<Shape> all = {{1, 1, 0},       {1, 1000, 0},   {1000, 1, 0},    {31, 33, 0},
                            {33, 31, 0},     {64, 64, 0},    {100, 4, 0},     {128, 260, 0},
                            {1000, 1001, 0}, {4097, 513, 0}, {513, 4097, 0},  {3, 100003, 0},
                            {100003, 3, 0},  {257, 8192, 0}, {2000, 2048, 0}, {1, 1 << 20, 0}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (!SmallOnly() || s.m * s.n <= 70000) out.push_back(s);
  return out;
}

std::string Describe(const Problem& p) {
  std::string s = std::string(OpName(p.op)) + " " + DTypeName(p.dtype) +
                  " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n);
  if (p.op == Op::kMatMul) s += " k=" + std::to_string(p.k);
  if (p.op == Op::kReduce)
    s += std::string(" ") + ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis);
  return s;
}

// Uniform values in [-1, 1) of the problem's dtype.
std::vector<char> RandomMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::vector<char> bytes(size_t(elements * ElementSize(dtype)));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    const double v = dist(rng);
    if (dtype == DType::kFloat32)
      reinterpret_cast<float*>(bytes.data())[i] = float(v);
    else
      reinterpret_cast<double*>(bytes.data())[i] = v;
  }
  return bytes;
}

class CudaKernelsTest : public testing::CudaSuite<CudaKernelsTest> {
 protected:
  // Launches `v` once on poisoned output and workspace; returns the output
  // bytes (empty on failure, with the failure recorded).
  // `a_offset` bytes (a multiple of the element size) put `a` that far past
  // the start of its allocation, so that it is not 16-byte aligned.
  // `out_poison` fills every byte of the output before the launch.
  std::vector<char> Launch(const Variant& v, const Problem& p, const std::vector<char>& a,
                           const std::vector<char>& b, size_t a_offset = 0, int out_poison = 0xFF) {
    const size_t out_bytes = size_t(OutputElements(p) * ElementSize(p.dtype));
    DeviceBuffer da(a.size() + a_offset), db(b.size()), dout(out_bytes), dws(v.WorkspaceBytes(p));
    char* a_at = static_cast<char*>(da.get()) + a_offset;
    // Everything is ordered on the test's stream: it does not synchronize
    // with the legacy default stream.
    EXPECT_EQ(cudaMemcpyAsync(a_at, a.data(), a.size(), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    if (!b.empty()) {
      EXPECT_EQ(cudaMemcpyAsync(db.get(), b.data(), b.size(), cudaMemcpyHostToDevice, stream_),
                cudaSuccess);
    }
    // All-ones bytes are a NaN in both float and double.
    EXPECT_EQ(cudaMemsetAsync(dout.get(), out_poison, out_bytes, stream_), cudaSuccess);
    if (dws.bytes() > 0) {
      EXPECT_EQ(cudaMemsetAsync(dws.get(), 0xFF, dws.bytes(), stream_), cudaSuccess);
    }
    Buffers buf;
    buf.a = a_at;
    buf.b = b.empty() ? nullptr : db.get();
    buf.out = dout.get();
    buf.workspace = dws.get();
    buf.workspace_bytes = dws.bytes();
    LaunchContext ctx;
    ctx.stream = stream_;
    ctx.cublas = cublas_;
    const absl::Status status = v.launch(p, buf, ctx);
    EXPECT_TRUE(status.ok()) << status;
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    std::vector<char> out(out_bytes);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), dout.get(), out_bytes, cudaMemcpyDeviceToHost, stream_),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    if (!status.ok() || sync != cudaSuccess) return {};
    return out;
  }

  // Checks every variant of `op` supporting the problem's dtype.
  void CheckAll(const Problem& p, std::mt19937_64& rng) {
    const std::vector<char> a = RandomMatrix(p.dtype, InputAElements(p), rng);
    const std::vector<char> b =
        p.op == Op::kMatMul ? RandomMatrix(p.dtype, InputBElements(p), rng) : std::vector<char>{};
    const std::vector<double> reference =
        ReferenceResult(p, a.data(), b.empty() ? nullptr : b.data());
    for (const Variant* v : DefaultRegistry().List(p.op, Backend::kCuda)) {
      if (!v->Supports(p.dtype)) continue;
      SCOPED_TRACE("variant " + v->name + ", " + Describe(p));
      const std::vector<char> out = Launch(*v, p, a, b);
      if (out.empty()) continue;
      const CheckResult check =
          CheckAgainstReference(p, v->reduced_precision, a.data(), out.data(), reference);
      EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error
                            << ", tolerance " << check.tolerance << ")";
      if (p.op == Op::kReduce) {
        const std::vector<char> again = Launch(*v, p, a, b);
        EXPECT_TRUE(again == out) << "two launches on the same input gave different bits";
      }
    }
  }
};

// True when `required` appears in `names` in the same order (others may sit
// between: the ladders may add variants).
bool ContainsInOrder(const std::vector<std::string>& names,
                     const std::vector<std::string>& required) {
  auto next = names.begin();
  for (const std::string& name : required) {
    next = std::find(next, names.end(), name);
    if (next == names.end()) return false;
    ++next;
  }
  return true;
}

// Needs no GPU: the registry only.
TEST(CudaLadders, HoldTheApiVariantsInOrder) {
  auto names = [](Op op) {
    std::vector<std::string> out;
    for (const Variant* v : DefaultRegistry().List(op, Backend::kCuda)) out.push_back(v->name);
    return out;
  };
  // The README's variant table, simplest first.
  EXPECT_TRUE(ContainsInOrder(names(Op::kMatMul), {"naive", "tiled16", "tiled32", "tiled32_padded",
                                                   "register_tiled", "cublas", "cublas_tf32"}))
      << ::testing::PrintToString(names(Op::kMatMul));
  EXPECT_TRUE(ContainsInOrder(names(Op::kTranspose),
                              {"naive", "shared", "shared_padded", "shared_swizzled", "cublas"}))
      << ::testing::PrintToString(names(Op::kTranspose));
  EXPECT_TRUE(
      ContainsInOrder(names(Op::kReduce), {"interleaved", "sequential", "warp_shuffle", "cub"}))
      << ::testing::PrintToString(names(Op::kReduce));
  for (const Variant* v : DefaultRegistry().List(Backend::kCuda)) {
    EXPECT_FALSE(v->description.empty()) << v->name;
    // Every variant takes float32, but those that exist for 16-bit inputs
    // (wmma's tensor-core fragments).
    EXPECT_TRUE(v->Supports(DType::kFloat32) ||
                (v->Supports(DType::kFloat16) && v->Supports(DType::kBFloat16)))
        << v->name;
    EXPECT_FALSE(v->reduced_precision && v->Supports(DType::kFloat64)) << v->name;
  }
  const Variant* tf32 = DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, "cublas_tf32");
  ASSERT_NE(tf32, nullptr);
  EXPECT_TRUE(tf32->reduced_precision);
}

TEST_F(CudaKernelsTest, MatMul) {
  std::mt19937_64 rng(seed_ + 1);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : MatMulShapes()) {
      Problem p;
      p.op = Op::kMatMul;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n, p.k = s.k;
      CheckAll(p, rng);
    }
  }
}

TEST_F(CudaKernelsTest, Transpose) {
  std::mt19937_64 rng(seed_ + 2);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : MatrixShapes()) {
      Problem p;
      p.op = Op::kTranspose;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      CheckAll(p, rng);
    }
  }
}

class CudaReduceTest : public CudaKernelsTest,
                       public ::testing::WithParamInterface<std::tuple<ReduceOp, ReduceAxis>> {};

TEST_P(CudaReduceTest, AllVariantsAllShapes) {
  const auto [op, axis] = GetParam();
  std::mt19937_64 rng(seed_ + 3 + int(op) * 3 + int(axis));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : MatrixShapes()) {
      Problem p;
      p.op = Op::kReduce;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      p.reduce_op = op;
      p.reduce_axis = axis;
      CheckAll(p, rng);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsAndAxes, CudaReduceTest,
                         ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kMin,
                                                              ReduceOp::kMax, ReduceOp::kMean),
                                            ::testing::Values(ReduceAxis::kAll, ReduceAxis::kPerRow,
                                                              ReduceAxis::kPerColumn)),
                         [](const auto& info) {
                           return std::string(ReduceOpName(std::get<0>(info.param))) + "_" +
                                  ReduceAxisName(std::get<1>(info.param));
                         });

// ---- NaN and infinities (docs/contract.md: MIN and MAX propagate NaN as NumPy's
// min/max do, SUM and MEAN follow IEEE arithmetic). Every variant, dtype, op
// and axis, with special values placed where each kernel's paths meet: the
// first element, the middle, the last (in the scalar tail after the 16-byte
// loads when the count is not a multiple of the vector width), the last
// element of the vectorized part, one row or one column only, next to
// infinities, rows and columns of infinities (MIN of only +inf is +inf, not
// FLT_MAX), and matrices of +inf, of -inf and of NaN. The output is poisoned
// with a finite value (bytes 0x41) instead of NaN, so that an output never
// written cannot pass for an expected NaN; the workspace keeps its NaN
// poison, so that a partial never written shows up as a NaN where none is
// expected.

constexpr int kFinitePoison = 0x41;  // 12.08f, 2.3e6 as a double

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Special {
  int64_t r, c;
  double v;
};

struct SpecialCase {
  std::string name;
  std::vector<Special> specials;
  bool fill = false;  // every element `fill_value` before `specials`
  double fill_value = 0;
};

std::vector<SpecialCase> SpecialCases(int64_t m, int64_t n) {
  std::vector<SpecialCase> cases;
  const int64_t rm = m / 2, cm = n / 2, count = m * n;
  auto at = [n](int64_t flat, double v) { return Special{flat / n, flat % n, v}; };
  cases.push_back({"NaN first", {{0, 0, kNaN}}});
  cases.push_back({"NaN middle", {{rm, cm, kNaN}}});
  cases.push_back({"NaN last", {{m - 1, n - 1, kNaN}}});
  // The last element covered by 16-byte loads of 4 floats (2 doubles: also
  // at a multiple of 4), when the count leaves a tail.
  if (count % 4 != 0 && count >= 4)
    cases.push_back({"NaN last of the vector loads", {at(count / 4 * 4 - 1, kNaN)}});
  // The last element of the first row and the first of the last row: the
  // ends of a row segment and of a column.
  cases.push_back({"NaN end of row 0", {{0, n - 1, kNaN}}});
  cases.push_back({"NaN start of the last row", {{m - 1, 0, kNaN}}});
  {
    SpecialCase row{"NaN between -inf and +inf in its row", {{rm, cm, kNaN}}};
    if (cm > 0) row.specials.push_back({rm, cm - 1, -kInf});
    if (cm + 1 < n) row.specials.push_back({rm, cm + 1, kInf});
    cases.push_back(row);
    SpecialCase col{"NaN between +inf and -inf in its column", {{rm, cm, kNaN}}};
    if (rm > 0) col.specials.push_back({rm - 1, cm, kInf});
    if (rm + 1 < m) col.specials.push_back({rm + 1, cm, -kInf});
    cases.push_back(col);
  }
  cases.push_back({"+inf first, -inf last, no NaN", {{0, 0, kInf}, {m - 1, n - 1, -kInf}}});
  SpecialCase inf_row{"row of +inf", {}}, inf_col{"column of -inf", {}};
  for (int64_t c = 0; c < n; ++c) inf_row.specials.push_back({rm, c, kInf});
  for (int64_t r = 0; r < m; ++r) inf_col.specials.push_back({r, cm, -kInf});
  cases.push_back(inf_row);
  cases.push_back(inf_col);
  cases.push_back({"all +inf", {}, true, kInf});
  cases.push_back({"all -inf", {}, true, -kInf});
  cases.push_back({"all NaN", {}, true, kNaN});
  return cases;
}

// `base` (random values) with the case's values written in.
std::vector<char> WithSpecials(DType dtype, int64_t n, std::vector<char> bytes,
                               const SpecialCase& c) {
  auto set = [&](int64_t i, double v) {
    if (dtype == DType::kFloat32) {
      const float f = float(v);
      std::memcpy(bytes.data() + i * 4, &f, 4);
    } else {
      std::memcpy(bytes.data() + i * 8, &v, 8);
    }
  };
  if (c.fill) {
    for (int64_t i = 0; i < int64_t(bytes.size()) / ElementSize(dtype); ++i) set(i, c.fill_value);
  }
  for (const Special& s : c.specials) set(s.r * n + s.c, s.v);
  return bytes;
}

double ElementOf(DType dtype, const std::vector<char>& bytes, int64_t i) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, bytes.data() + i * 4, 4);
    return f;
  }
  double d;
  std::memcpy(&d, bytes.data() + i * 8, 8);
  return d;
}

// What NumPy gives (np.min(x), np.min(x, axis=1), np.min(x, axis=0), ...),
// in float64: a NaN in a reduced range gives NaN for every op; otherwise
// MIN/MAX are exact and SUM/MEAN IEEE sums.
std::vector<double> NumPyReduce(const Problem& p, const std::vector<char>& a) {
  const int64_t groups = OutputElements(p);
  const double init = p.reduce_op == ReduceOp::kMin   ? kInf
                      : p.reduce_op == ReduceOp::kMax ? -kInf
                                                      : 0.0;
  std::vector<double> out(groups, init);
  std::vector<bool> nan(groups, false);
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      const int64_t g = p.reduce_axis == ReduceAxis::kAll      ? 0
                        : p.reduce_axis == ReduceAxis::kPerRow ? r
                                                               : c;
      const double x = ElementOf(p.dtype, a, r * p.n + c);
      if (std::isnan(x))
        nan[g] = true;
      else if (p.reduce_op == ReduceOp::kMin)
        out[g] = std::min(out[g], x);
      else if (p.reduce_op == ReduceOp::kMax)
        out[g] = std::max(out[g], x);
      else
        out[g] += x;
    }
  }
  const double count = double(p.m) * double(p.n) / double(groups);
  for (int64_t g = 0; g < groups; ++g) {
    if (nan[g])
      out[g] = kNaN;
    else if (p.reduce_op == ReduceOp::kMean)
      out[g] /= count;
  }
  return out;
}

// NaN matches NaN; an infinity only itself; MIN and MAX are exact (the
// result is one of the inputs); SUM and MEAN within the contract.
bool Matches(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= tol;
}

class CudaReduceSpecialTest : public CudaKernelsTest {
 protected:
  // Every CUDA reduce variant on `a`, against NumPy's result element by
  // element and against ReferenceResult through CheckAgainstReference. (Run
  // to run determinism is CudaReduceTest's; it is not repeated here, to keep
  // the binary inside bench/gpu_checks.sh's 300 s.)
  void CheckVariants(const Problem& p, const std::vector<char>& a, size_t a_offset = 0) {
    const std::vector<double> want = NumPyReduce(p, a);
    const std::vector<double> reference = ReferenceResult(p, a.data(), nullptr);
    ASSERT_EQ(reference.size(), want.size());
    const bool exact = p.reduce_op == ReduceOp::kMin || p.reduce_op == ReduceOp::kMax;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(Matches(reference[i], want[i], exact ? 0 : 1e-9 * double(p.m * p.n)))
          << "host reference element " << i << ": " << reference[i] << ", NumPy " << want[i];
    }
    const double tol = (p.dtype == DType::kFloat32 ? 1e-5 : 1e-12) * double(p.m * p.n);
    for (const Variant* v : DefaultRegistry().List(Op::kReduce, Backend::kCuda)) {
      if (!v->Supports(p.dtype)) continue;
      SCOPED_TRACE("variant " + v->name);
      const std::vector<char> out = Launch(*v, p, a, {}, a_offset, kFinitePoison);
      if (out.empty()) continue;
      int bad = 0;
      for (size_t i = 0; i < want.size() && bad < 5; ++i) {
        const double got = ElementOf(p.dtype, out, int64_t(i));
        if (!Matches(got, want[i], exact ? 0 : tol)) {
          ++bad;
          ADD_FAILURE() << "element " << i << ": got " << got << ", NumPy gives " << want[i];
        }
      }
      const CheckResult check = CheckAgainstReference(p, false, a.data(), out.data(), reference);
      EXPECT_TRUE(check.ok) << check.message;
    }
  }
};

// Shapes above 70,000 elements cost host time (the float64 references and
// checks) in every case: they run MIN and MAX only, on a few cases (a NaN in
// the middle, in the scalar tail and at the end of the vector loads, a row
// of +inf, all +inf, all NaN), which still reach their tails, multi-block
// partials and long rows. GPUCOMPUTE_TEST_SMALL=1 (compute-sanitizer, where
// every launch is slow) keeps the same few cases on every shape.
bool Large(const Shape& s) { return s.m * s.n > 70000; }
bool FewCases(const Shape& s) { return Large(s) || SmallOnly(); }
bool FewCase(const std::string& name) {
  return name == "NaN middle" || name == "NaN last" || name == "NaN last of the vector loads" ||
         name == "row of +inf" || name == "all NaN" || name == "all +inf";
}

std::vector<Shape> SpecialShapes() {
  // Vector-width multiples and not, one row / one column, the multi-pass tree
  // sizes, warp_shuffle's block-per-row rows (cols >= 1024, few rows), its
  // chunked columns (m >= 128) and a multi-block ALL.
  std::vector<Shape> all = {{1, 1, 0},      {2, 2, 0},      {1, 1000, 0},    {1000, 1, 0},
                            {31, 33, 0},    {33, 31, 0},    {64, 64, 0},     {100, 4, 0},
                            {3, 513, 0},    {128, 260, 0},  {1000, 1001, 0}, {4097, 513, 0},
                            {7, 4100, 0},   {3, 100003, 0}, {100003, 3, 0},  {2000, 2048, 0},
                            {1, 1 << 20, 0}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (!SmallOnly() || s.m * s.n <= 70000) out.push_back(s);
  return out;
}

class CudaReduceSpecialOpTest
    : public CudaReduceSpecialTest,
      public ::testing::WithParamInterface<std::tuple<ReduceOp, ReduceAxis>> {};

TEST_P(CudaReduceSpecialOpTest, NaNAndInfinityCases) {
  const auto [op, axis] = GetParam();
  std::mt19937_64 rng(seed_ + 101 + int(op) * 3 + int(axis));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const bool min_max = op == ReduceOp::kMin || op == ReduceOp::kMax;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : SpecialShapes()) {
      if (Large(s) && !min_max) continue;
      Problem p;
      p.op = Op::kReduce;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      p.reduce_op = op;
      p.reduce_axis = axis;
      const std::vector<char> base = RandomMatrix(dtype, s.m * s.n, rng);
      for (const SpecialCase& c : SpecialCases(s.m, s.n)) {
        if (FewCases(s) && !FewCase(c.name)) continue;
        SCOPED_TRACE(Describe(p) + ": " + c.name);
        CheckVariants(p, WithSpecials(dtype, s.n, base, c));
      }
    }
  }
}

// The input one element past a 16-byte boundary: the kernels take their
// scalar (not 16-byte) paths, whose tails differ.
TEST_P(CudaReduceSpecialOpTest, NaNWithUnalignedInput) {
  const auto [op, axis] = GetParam();
  std::mt19937_64 rng(seed_ + 201 + int(op) * 3 + int(axis));
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : {Shape{1, 1000, 0}, Shape{33, 32, 0}, Shape{64, 64, 0}, Shape{3, 4100, 0},
                           Shape{300, 128, 0}}) {
      Problem p;
      p.op = Op::kReduce;
      p.dtype = dtype;
      p.m = s.m, p.n = s.n;
      p.reduce_op = op;
      p.reduce_axis = axis;
      const std::vector<char> base = RandomMatrix(dtype, s.m * s.n, rng);
      for (const SpecialCase& c : SpecialCases(s.m, s.n)) {
        if (FewCases(s) && !FewCase(c.name)) continue;
        SCOPED_TRACE(Describe(p) + " at +1 element: " + c.name);
        CheckVariants(p, WithSpecials(dtype, s.n, base, c), size_t(ElementSize(dtype)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpsAndAxes, CudaReduceSpecialOpTest,
                         ::testing::Combine(::testing::Values(ReduceOp::kMin, ReduceOp::kMax,
                                                              ReduceOp::kSum, ReduceOp::kMean),
                                            ::testing::Values(ReduceAxis::kAll, ReduceAxis::kPerRow,
                                                              ReduceAxis::kPerColumn)),
                         [](const auto& info) {
                           return std::string(ReduceOpName(std::get<0>(info.param))) + "_" +
                                  ReduceAxisName(std::get<1>(info.param));
                         });

// One NaN at every position of small matrices in turn (every lane of a
// 16-byte load, every row and column end; exactly one row and one column
// hold it), MIN and MAX, every axis.
TEST_F(CudaReduceSpecialTest, NaNAtEveryPosition) {
  std::mt19937_64 rng(seed_ + 301);
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : {Shape{4, 20, 0}, Shape{5, 19, 0}, Shape{19, 5, 0}}) {
      if (SmallOnly() && s.m != 5) continue;  // one shape under compute-sanitizer
      for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
        for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
          Problem p;
          p.op = Op::kReduce;
          p.dtype = dtype;
          p.m = s.m, p.n = s.n;
          p.reduce_op = op;
          p.reduce_axis = axis;
          const std::vector<char> base = RandomMatrix(dtype, s.m * s.n, rng);
          for (int64_t r = 0; r < s.m; ++r) {
            for (int64_t c = 0; c < s.n; ++c) {
              const std::string at = "NaN at [" + std::to_string(r) + "," + std::to_string(c) + "]";
              SCOPED_TRACE(Describe(p) + ": " + at);
              CheckVariants(p, WithSpecials(dtype, s.n, base, {at, {{r, c, kNaN}}}));
            }
          }
        }
      }
    }
  }
}

// The NaN rule's small case, [[nan, 1], [2, inf]], against what NumPy prints.
TEST_F(CudaReduceSpecialTest, NumPyExample) {
  struct Want {
    ReduceOp op;
    ReduceAxis axis;
    std::vector<double> out;
  };
  const Want wants[] = {
      {ReduceOp::kMin, ReduceAxis::kAll, {kNaN}},
      {ReduceOp::kMin, ReduceAxis::kPerRow, {kNaN, 2}},
      {ReduceOp::kMin, ReduceAxis::kPerColumn, {kNaN, 1}},
      {ReduceOp::kMax, ReduceAxis::kAll, {kNaN}},
      {ReduceOp::kMax, ReduceAxis::kPerRow, {kNaN, kInf}},
      {ReduceOp::kMax, ReduceAxis::kPerColumn, {kNaN, kInf}},
      {ReduceOp::kSum, ReduceAxis::kPerRow, {kNaN, kInf}},
      {ReduceOp::kMean, ReduceAxis::kPerColumn, {kNaN, kInf}},
  };
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const std::vector<char> a =
        WithSpecials(dtype, 2, std::vector<char>(size_t(4 * ElementSize(dtype))),
                     {"x", {{0, 0, kNaN}, {0, 1, 1}, {1, 0, 2}, {1, 1, kInf}}});
    for (const Want& w : wants) {
      Problem p;
      p.op = Op::kReduce;
      p.dtype = dtype;
      p.m = 2, p.n = 2;
      p.reduce_op = w.op;
      p.reduce_axis = w.axis;
      SCOPED_TRACE(Describe(p));
      for (const Variant* v : DefaultRegistry().List(Op::kReduce, Backend::kCuda)) {
        if (!v->Supports(dtype)) continue;
        SCOPED_TRACE("variant " + v->name);
        const std::vector<char> out = Launch(*v, p, a, {}, 0, kFinitePoison);
        if (out.empty()) continue;
        for (size_t i = 0; i < w.out.size(); ++i) {
          const double got = ElementOf(dtype, out, int64_t(i));
          EXPECT_TRUE(Matches(got, w.out[i], 0))
              << "element " << i << ": got " << got << ", NumPy gives " << w.out[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpucompute::kernels
