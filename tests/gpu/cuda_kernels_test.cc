// Every CUDA variant x dtype (x op x axis for reductions) against the float64
// CPU reference at odd shapes, on fresh random data (the seed is printed on
// failure), with outputs and workspace poisoned with NaN before each launch.
// Reductions are also launched twice to check that they are deterministic.
// GPUCOMPUTE_TEST_SMALL=1 keeps only small shapes (for compute-sanitizer).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {
namespace {

struct Shape {
  int64_t m, n, k;
};

bool SmallOnly() {
  const char* v = std::getenv("GPUCOMPUTE_TEST_SMALL");
  return v != nullptr && std::string(v) == "1";
}

std::vector<Shape> MatMulShapes() {
  std::vector<Shape> all = {{1, 1, 1},      {1, 300, 17},    {300, 1, 17},   {31, 33, 17},
                            {33, 31, 1},    {64, 64, 64},    {130, 129, 131}, {132, 260, 36},
                            {256, 256, 128}, {257, 255, 8},  {64, 96, 2048}, {1000, 1001, 67},
                            {4097, 513, 9}, {129, 4097, 33}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (!SmallOnly() || s.m * s.n * s.k <= 600000) out.push_back(s);
  return out;
}

std::vector<Shape> MatrixShapes() {
  std::vector<Shape> all = {{1, 1, 0},       {1, 1000, 0},    {1000, 1, 0},    {31, 33, 0},
                            {33, 31, 0},     {64, 64, 0},     {100, 4, 0},     {128, 260, 0},
                            {1000, 1001, 0}, {4097, 513, 0},  {513, 4097, 0},  {3, 100003, 0},
                            {100003, 3, 0},  {257, 8192, 0},  {2000, 2048, 0}, {1, 1 << 20, 0}};
  std::vector<Shape> out;
  for (const Shape& s : all)
    if (!SmallOnly() || s.m * s.n <= 70000) out.push_back(s);
  return out;
}

std::string Describe(const Problem& p) {
  std::string s = std::string(OpName(p.op)) + " " + DTypeName(p.dtype) + " m=" +
                  std::to_string(p.m) + " n=" + std::to_string(p.n);
  if (p.op == Op::kMatMul) s += " k=" + std::to_string(p.k);
  if (p.op == Op::kReduce) s += std::string(" ") + ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis);
  return s;
}

// Uniform values in [-1, 1) of the problem's dtype.
std::vector<char> RandomMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::vector<char> bytes(size_t(elements * ElementSize(dtype)));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  for (int64_t i = 0; i < elements; ++i) {
    const double v = dist(rng);
    if (dtype == DType::kFloat32) reinterpret_cast<float*>(bytes.data())[i] = float(v);
    else reinterpret_cast<double*>(bytes.data())[i] = v;
  }
  return bytes;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

class CudaKernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      skip_reason_ = err != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(err)
                                        : "no CUDA device present";
      cudaGetLastError();
      return;
    }
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cublasCreate(&cublas_);
    seed_ = std::random_device{}();
  }
  static void TearDownTestSuite() {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cublas_ = nullptr;
    stream_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << "SKIPPED (GPU test): " << skip_reason_;
  }

  // Launches `v` once on poisoned output and workspace; returns the output
  // bytes (empty on failure, with the failure recorded).
  std::vector<char> Launch(const Variant& v, const Problem& p, const std::vector<char>& a,
                           const std::vector<char>& b) {
    const size_t out_bytes = size_t(OutputElements(p) * ElementSize(p.dtype));
    DeviceBuffer da(a.size()), db(b.size()), dout(out_bytes), dws(v.WorkspaceBytes(p));
    // Everything is ordered on the test's stream: it does not synchronize
    // with the legacy default stream.
    EXPECT_EQ(cudaMemcpyAsync(da.get(), a.data(), a.size(), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    if (!b.empty()) {
      EXPECT_EQ(cudaMemcpyAsync(db.get(), b.data(), b.size(), cudaMemcpyHostToDevice, stream_),
                cudaSuccess);
    }
    // All-ones bytes are a NaN in both float and double.
    EXPECT_EQ(cudaMemsetAsync(dout.get(), 0xFF, out_bytes, stream_), cudaSuccess);
    if (dws.bytes() > 0) {
      EXPECT_EQ(cudaMemsetAsync(dws.get(), 0xFF, dws.bytes(), stream_), cudaSuccess);
    }
    Buffers buf;
    buf.a = da.get();
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
    const std::vector<double> reference = ReferenceResult(p, a.data(), b.empty() ? nullptr : b.data());
    for (const Variant* v : DefaultRegistry().List(p.op, Backend::kCuda)) {
      if (!v->Supports(p.dtype)) continue;
      SCOPED_TRACE("variant " + v->name + ", " + Describe(p));
      const std::vector<char> out = Launch(*v, p, a, b);
      if (out.empty()) continue;
      const CheckResult check = CheckAgainstReference(p, v->reduced_precision, a.data(), out.data(), reference);
      EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error
                            << ", tolerance " << check.tolerance << ")";
      if (p.op == Op::kReduce) {
        const std::vector<char> again = Launch(*v, p, a, b);
        EXPECT_TRUE(again == out) << "two launches on the same input gave different bits";
      }
    }
  }

  static inline std::string skip_reason_;
  static inline cudaStream_t stream_ = nullptr;
  static inline cublasHandle_t cublas_ = nullptr;
  static inline uint64_t seed_ = 0;
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
  // API.md's minimum set, simplest first.
  EXPECT_TRUE(ContainsInOrder(names(Op::kMatMul),
                              {"naive", "tiled16", "tiled32", "tiled32_padded", "register_tiled",
                               "cublas", "cublas_tf32"}))
      << ::testing::PrintToString(names(Op::kMatMul));
  EXPECT_TRUE(ContainsInOrder(names(Op::kTranspose),
                              {"naive", "shared", "shared_padded", "shared_swizzled", "cublas"}))
      << ::testing::PrintToString(names(Op::kTranspose));
  EXPECT_TRUE(ContainsInOrder(names(Op::kReduce),
                              {"interleaved", "sequential", "warp_shuffle", "cub"}))
      << ::testing::PrintToString(names(Op::kReduce));
  for (const Variant* v : DefaultRegistry().List(Backend::kCuda)) {
    EXPECT_FALSE(v->description.empty()) << v->name;
    EXPECT_TRUE(v->Supports(DType::kFloat32)) << v->name;
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

INSTANTIATE_TEST_SUITE_P(
    OpsAndAxes, CudaReduceTest,
    ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                         ReduceOp::kMean),
                       ::testing::Values(ReduceAxis::kAll, ReduceAxis::kPerRow,
                                         ReduceAxis::kPerColumn)),
    [](const auto& info) {
      return std::string(ReduceOpName(std::get<0>(info.param))) + "_" +
             ReduceAxisName(std::get<1>(info.param));
    });

}  // namespace
}  // namespace gpucompute::kernels
