// The mma.sync MatMul rungs (mma_padded, mma_swizzled: one kernel, two
// shared-memory layouts), FP16 and BF16 in, 16-bit and float32 out, on
// fresh random data in [-1, 1] (the seed is printed on failure) with
// NaN-poisoned outputs: odd shapes against the float64 reference, both
// staging paths (cp.async where k and n are multiples of 8 and the inputs
// 16-byte aligned, element by element otherwise), inputs and outputs off
// their alignment, and 4095 x 4097 x 4096 and 4095 x 4104 x 4096 against
// cuBLAS GemmEx's float32 result (FP32 accumulation) within the output
// dtype's MatMul tolerance.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

constexpr const char* kMmaVariants[] = {"mma_padded", "mma_swizzled"};
constexpr DType kHalfDTypes[] = {DType::kFloat16, DType::kBFloat16};

struct Shape {
  int64_t m, n, k;
};

Problem HalfMatMul(DType dtype, bool float32_output, const Shape& s) {
  Problem p;
  p.op = Op::kMatMul;
  p.dtype = dtype;
  p.float32_output = float32_output;
  p.m = s.m, p.n = s.n, p.k = s.k;
  return p;
}

std::string Describe(const Problem& p) {
  return std::string(DTypeName(p.dtype)) + " -> " + DTypeName(OutputDType(p)) +
         " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
}

std::vector<char> RandomHalfMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<char> bytes(size_t(elements) * 2);
  for (int64_t i = 0; i < elements; ++i) {
    const float v = dist(rng);
    const uint16_t bits = dtype == DType::kFloat16 ? ToFloat16(v).bits : ToBFloat16(v).bits;
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  }
  return bytes;
}

const Variant* Mma(const char* name) {
  return DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, name);
}

// Where the inputs and the output start in their allocations, in elements
// (1: off 16-byte alignment, so neither cp.async nor 4-wide stores may be
// used).
struct Offsets {
  size_t a = 0, b = 0, out = 0;
};

class MmaMatMulTest : public testing::CudaSuite<MmaMatMulTest> {
 protected:
  // The inputs on the device at the given offsets.
  struct Inputs {
    Inputs(const std::vector<char>& a_, const std::vector<char>& b_, const Offsets& at)
        : a(a_.size() + 2 * at.a), b(b_.size() + 2 * at.b), offsets(at) {}
    DeviceBuffer a, b;
    Offsets offsets;
    const char* a_at() const { return static_cast<const char*>(a.get()) + 2 * offsets.a; }
    const char* b_at() const { return static_cast<const char*>(b.get()) + 2 * offsets.b; }
  };

  std::unique_ptr<Inputs> Upload(const std::vector<char>& a, const std::vector<char>& b,
                                 const Offsets& at) {
    auto in = std::make_unique<Inputs>(a, b, at);
    EXPECT_EQ(cudaMemcpy(const_cast<char*>(in->a_at()), a.data(), a.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(const_cast<char*>(in->b_at()), b.data(), b.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    return in;
  }

  // Launches `v` once on a NaN-poisoned output; the output bytes, empty on
  // failure (recorded).
  std::vector<char> Launch(const Variant& v, const Problem& p, const Inputs& in) {
    const size_t out_bytes = size_t(OutputBytes(p));
    const size_t out_offset = in.offsets.out * size_t(ElementSize(OutputDType(p)));
    DeviceBuffer dout(out_bytes + out_offset);
    char* out_at = static_cast<char*>(dout.get()) + out_offset;
    // All-ones bytes are a NaN in every dtype.
    EXPECT_EQ(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), stream_), cudaSuccess);
    Buffers buf;
    buf.a = in.a_at();
    buf.b = in.b_at();
    buf.out = out_at;
    LaunchContext ctx;
    ctx.stream = stream_;
    ctx.cublas = cublas_;
    const absl::Status status = v.launch(p, buf, ctx);
    EXPECT_TRUE(status.ok()) << status;
    const cudaError_t sync = cudaStreamSynchronize(stream_);
    EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
    std::vector<char> out(out_bytes);
    EXPECT_EQ(cudaMemcpy(out.data(), out_at, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    if (!status.ok() || sync != cudaSuccess) return {};
    return out;
  }

  // cuBLAS GemmEx on the same device inputs: 16-bit in, FP32 accumulation,
  // float32 out (row-major through B first, m and n swapped).
  std::vector<double> CublasReference(const Problem& p, const Inputs& in) {
    const cudaDataType_t type = p.dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
    DeviceBuffer dref(size_t(p.m * p.n) * sizeof(float));
    const float one = 1, zero = 0;
    EXPECT_EQ(cublasSetStream(cublas_, stream_), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, int(p.n), int(p.m), int(p.k), &one,
                           in.b_at(), type, int(p.n), in.a_at(), type, int(p.k), &zero, dref.get(),
                           CUDA_R_32F, int(p.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> got(size_t(p.m * p.n));
    EXPECT_EQ(cudaMemcpy(got.data(), dref.get(), dref.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return std::vector<double>(got.begin(), got.end());
  }

  // Both variants, both output dtypes, on (a, b) against the float64
  // reference or cuBLAS's float32 result.
  void CheckBoth(DType dtype, const Shape& s, const std::vector<char>& a,
                 const std::vector<char>& b, const Offsets& at, bool against_cublas) {
    const std::unique_ptr<Inputs> in = Upload(a, b, at);
    const std::vector<double> cublas_reference =
        against_cublas ? CublasReference(HalfMatMul(dtype, true, s), *in) : std::vector<double>{};
    for (bool float32_output : {false, true}) {
      const Problem p = HalfMatMul(dtype, float32_output, s);
      const std::vector<double> reference =
          against_cublas ? cublas_reference : ReferenceResult(p, a.data(), b.data());
      for (const char* name : kMmaVariants) {
        const Variant* v = Mma(name);
        ASSERT_NE(v, nullptr) << name;
        SCOPED_TRACE(std::string("variant ") + name + ", " + Describe(p) + ", offsets a " +
                     std::to_string(at.a) + " b " + std::to_string(at.b) + " out " +
                     std::to_string(at.out) + (against_cublas ? ", against cuBLAS" : "") +
                     ", seed " + std::to_string(seed_));
        const std::vector<char> out = Launch(*v, p, *in);
        if (out.empty()) continue;
        const CheckResult check = CheckAgainstReference(p, false, a.data(), out.data(), reference);
        EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error
                              << ", tolerance " << check.tolerance << ")";
      }
    }
  }
};

// Needs no GPU: the registry only.
TEST(MmaMatMulLadder, BothRungsTakeSixteenBitsOnlyAndTeachTheirIdeas) {
  for (const char* name : kMmaVariants) {
    const Variant* v = Mma(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_TRUE(v->Supports(DType::kFloat16)) << name;
    EXPECT_TRUE(v->Supports(DType::kBFloat16)) << name;
    EXPECT_FALSE(v->Supports(DType::kFloat32)) << name;
    EXPECT_FALSE(v->Supports(DType::kFloat64)) << name;
  }
  EXPECT_EQ(Mma("mma_padded")->lesson.before, "wmma");
  EXPECT_EQ(Mma("mma_swizzled")->lesson.before, "mma_padded");
  // Both layouts keep ldmatrix free of bank conflicts; what the swizzle
  // saves is cp.async's shared-memory wavefronts.
  EXPECT_EQ(Mma("mma_swizzled")->lesson.counter,
            "smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum");
  EXPECT_FALSE(Mma("mma_swizzled")->lesson.counter_rises);
}

TEST_F(MmaMatMulTest, OddShapesAreWithinTheDTypesTolerance) {
  std::mt19937_64 rng(seed_ + 1);
  // The first three stage element by element (k or n not a multiple of 8);
  // the rest with cp.async: a whole block tile, partial edge tiles with a
  // k-tail, and a single row and column band.
  for (const Shape& s :
       {Shape{1, 1, 1}, Shape{17, 33, 65}, Shape{257, 129, 1000}, Shape{128, 256, 64},
        Shape{300, 264, 1000}, Shape{1, 8, 8}, Shape{129, 520, 40}}) {
    for (DType dtype : kHalfDTypes) {
      const std::vector<char> a = RandomHalfMatrix(dtype, s.m * s.k, rng);
      const std::vector<char> b = RandomHalfMatrix(dtype, s.k * s.n, rng);
      CheckBoth(dtype, s, a, b, Offsets{}, false);
    }
  }
}

// Inputs one element past 16-byte alignment must be staged element by
// element, and an output one element off stored element by element: no
// fault, no misread, shapes on which the aligned path would use cp.async.
TEST_F(MmaMatMulTest, UnalignedInputsAndOutputsFallBack) {
  std::mt19937_64 rng(seed_ + 2);
  for (const Shape& s : {Shape{136, 128, 64}, Shape{200, 264, 1000}}) {
    for (DType dtype : kHalfDTypes) {
      const std::vector<char> a = RandomHalfMatrix(dtype, s.m * s.k, rng);
      const std::vector<char> b = RandomHalfMatrix(dtype, s.k * s.n, rng);
      for (const Offsets& at : {Offsets{1, 0, 0}, Offsets{0, 1, 0}, Offsets{0, 0, 1}}) {
        CheckBoth(dtype, s, a, b, at, false);
      }
    }
  }
}

// Large odd shapes, where a float64 host reference would take minutes:
// cuBLAS's float32 result instead (its own float rounding is far below the
// 16-bit outputs' tolerance and within float32's). n = 4097 stages element
// by element; n = 4104 with cp.async, both with partial edge tiles.
TEST_F(MmaMatMulTest, LargeOddShapesMatchCublas) {
  std::mt19937_64 rng(seed_ + 3);
  for (const Shape& s : {Shape{4095, 4097, 4096}, Shape{4095, 4104, 4096}}) {
    for (DType dtype : kHalfDTypes) {
      const std::vector<char> a = RandomHalfMatrix(dtype, s.m * s.k, rng);
      const std::vector<char> b = RandomHalfMatrix(dtype, s.k * s.n, rng);
      CheckBoth(dtype, s, a, b, Offsets{}, true);
    }
  }
}

}  // namespace
}  // namespace gpucompute::kernels
