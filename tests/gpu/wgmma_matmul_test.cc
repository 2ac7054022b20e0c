// The Hopper wgmma MatMul (kernels/cuda/matmul/wgmma.cu) launched directly,
// FP16 and BF16 in, 16-bit and float32 out, against cuBLAS GemmEx with FP32
// accumulation, within the output dtype's tolerance, on NaN-poisoned outputs
// and fresh random data in [-1, 1] (the seed is printed on failure): TMA
// shapes with edge tiles and k-tails (n and k multiples of 8), and the
// problems it hands to the WMMA kernel (odd n or k, misaligned pointers).
// The ladder lists it on compute capability 9.0 devices only.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/matmul/matmul_kernels.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int64_t m, n, k;
};

// Where the inputs and output start in their allocations, in elements (1:
// not 16-byte aligned).
struct Offsets {
  int64_t a = 0, b = 0, c = 0;
};

template <typename T>
constexpr DType DTypeOf() {
  return std::is_same_v<T, __half> ? DType::kFloat16 : DType::kBFloat16;
}

template <typename T>
constexpr cudaDataType_t CudaTypeOf() {
  return std::is_same_v<T, __half> ? CUDA_R_16F : CUDA_R_16BF;
}

std::string Describe(const Problem& p, const Offsets& o) {
  return std::string(DTypeName(p.dtype)) + " -> " + DTypeName(OutputDType(p)) +
         " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         " offsets a=" + std::to_string(o.a) + " b=" + std::to_string(o.b) +
         " c=" + std::to_string(o.c);
}

std::vector<uint16_t> RandomHalfMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> bits(static_cast<size_t>(elements));
  for (uint16_t& b : bits) {
    const float v = dist(rng);
    b = dtype == DType::kFloat16 ? ToFloat16(v).bits : ToBFloat16(v).bits;
  }
  return bits;
}

int CountVariant(const char* name) {
  return DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, name) != nullptr ? 1 : 0;
}

class WgmmaMatMulTest : public testing::CudaSuite<WgmmaMatMulTest> {
 protected:
  // C = A * B by LaunchWgmmaMatMul<T, Out> on a NaN-poisoned output and by
  // cuBLAS (float output, FP32 accumulation) as the reference.
  template <typename T, typename Out>
  void Check(const Shape& s, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
             const Offsets& o = {}) {
    Problem p;
    p.op = Op::kMatMul;
    p.dtype = DTypeOf<T>();
    p.float32_output = std::is_same_v<Out, float>;
    p.m = s.m, p.n = s.n, p.k = s.k;
    SCOPED_TRACE(Describe(p, o) + ", seed " + std::to_string(seed_));
    const size_t outputs = size_t(s.m * s.n);
    DeviceBuffer da((a.size() + size_t(o.a)) * 2), db((b.size() + size_t(o.b)) * 2);
    DeviceBuffer dout((outputs + size_t(o.c)) * sizeof(Out)), dref(outputs * sizeof(float));
    T* a_at = static_cast<T*>(da.get()) + o.a;
    T* b_at = static_cast<T*>(db.get()) + o.b;
    Out* out_at = static_cast<Out*>(dout.get()) + o.c;
    ASSERT_EQ(cudaMemcpyAsync(a_at, a.data(), a.size() * 2, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(b_at, b.data(), b.size() * 2, cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    // All-ones bytes are a NaN in every dtype.
    ASSERT_EQ(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), stream_), cudaSuccess);
    const cudaError_t launched =
        cuda::LaunchWgmmaMatMul<T, Out>(a_at, b_at, out_at, s.m, s.n, s.k, stream_);
    ASSERT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
    // Row-major C = A B is column-major C^T = B^T A^T.
    const float one = 1.0f, zero = 0.0f;
    ASSERT_EQ(cublasSetStream(cublas_, stream_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(
        cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, int(s.n), int(s.m), int(s.k), &one, b_at,
                     CudaTypeOf<T>(), int(s.n), a_at, CudaTypeOf<T>(), int(s.k), &zero, dref.get(),
                     CUDA_R_32F, int(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        CUBLAS_STATUS_SUCCESS);
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    ASSERT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    std::vector<char> out(outputs * sizeof(Out));
    std::vector<float> ref(outputs);
    ASSERT_EQ(cudaMemcpy(out.data(), out_at, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(
        cudaMemcpy(ref.data(), dref.get(), ref.size() * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    const std::vector<double> reference(ref.begin(), ref.end());
    const CheckResult check = CheckAgainstReference(p, false, a.data(), out.data(), reference);
    EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error
                          << ", tolerance " << check.tolerance << ")";
  }

  // Both input dtypes, both output types, one random A and B per dtype.
  void CheckEveryType(const Shape& s, std::mt19937_64& rng, const Offsets& o = {}) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      const std::vector<uint16_t> a = RandomHalfMatrix(dtype, s.m * s.k, rng);
      const std::vector<uint16_t> b = RandomHalfMatrix(dtype, s.k * s.n, rng);
      if (dtype == DType::kFloat16) {
        Check<__half, __half>(s, a, b, o);
        Check<__half, float>(s, a, b, o);
      } else {
        Check<__nv_bfloat16, __nv_bfloat16>(s, a, b, o);
        Check<__nv_bfloat16, float>(s, a, b, o);
      }
    }
  }
};

// Needs no GPU: the ladder lists wgmma where every device runs sm_90a code.
TEST(WgmmaMatMulLadder, IsListedOnComputeCapability90Only) {
  int count = 0;
  bool sm90 = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  for (int device = 0; sm90 && device < count; ++device) {
    cudaDeviceProp prop{};
    sm90 =
        cudaGetDeviceProperties(&prop, device) == cudaSuccess && prop.major == 9 && prop.minor == 0;
  }
  EXPECT_EQ(CountVariant("wgmma"), sm90 ? 1 : 0);
  const Variant* wgmma = DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, "wgmma");
  if (wgmma == nullptr) GTEST_SKIP() << "SKIPPED: wgmma is not listed on this machine";
  EXPECT_TRUE(wgmma->Supports(DType::kFloat16));
  EXPECT_TRUE(wgmma->Supports(DType::kBFloat16));
  EXPECT_FALSE(wgmma->Supports(DType::kFloat32));
  EXPECT_EQ(wgmma->lesson.before, "wmma");
}

// n and k multiples of 8, aligned pointers: TMA and wgmma, with partial
// tiles in m and n (m: 1, 130, 257, 4095; n: 8, 264, 136, 4104), k-tails
// (k: 8, 72, 1000) and exactly one tile (128 x 256 x 64).
TEST_F(WgmmaMatMulTest, TmaShapesAreWithinTolerance) {
  std::mt19937_64 rng(seed_ + 1);
  for (const Shape& s : {Shape{1, 8, 8}, Shape{130, 264, 72}, Shape{257, 136, 1000},
                         Shape{128, 256, 64}, Shape{4095, 4104, 4096}}) {
    CheckEveryType(s, rng);
  }
}

// n or k not a multiple of 8: TMA's strides would not be multiples of 16
// bytes, and the WMMA kernel takes the problem.
TEST_F(WgmmaMatMulTest, OddShapesFallBackWithinTolerance) {
  std::mt19937_64 rng(seed_ + 2);
  for (const Shape& s : {Shape{1, 1, 1}, Shape{17, 33, 65}, Shape{257, 129, 1000},
                         Shape{64, 64, 60}, Shape{4095, 4097, 4096}}) {
    CheckEveryType(s, rng);
  }
}

// Inputs or output one element past 16-byte alignment: no tensor map can
// start there, and the WMMA kernel takes the problem.
TEST_F(WgmmaMatMulTest, MisalignedPointersFallBackWithinTolerance) {
  std::mt19937_64 rng(seed_ + 3);
  for (const Offsets& o : {Offsets{1, 0, 0}, Offsets{0, 1, 0}, Offsets{0, 0, 1}}) {
    CheckEveryType(Shape{257, 136, 1000}, rng, o);
  }
}

}  // namespace
}  // namespace gpucompute::kernels
