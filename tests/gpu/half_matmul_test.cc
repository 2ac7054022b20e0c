// FP16 and BF16 MatMul on the CUDA ladder: every variant whose row lists a
// 16-bit dtype, with a 16-bit and a float32 output, against the float64
// reference at odd shapes (cp.async and element-wise staging, edge tiles,
// k-tails), on fresh random data in [-1, 1] (the seed is printed on
// failure); k = 1 bit for bit against the CPU variant; products beyond the
// FP16 range; NaN and infinity propagation; and a variant asked for a dtype
// its row does not list answers an error.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/matmul/matmul_kernels.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/cuda_suite.h"

namespace gpucompute::kernels {
namespace {

using testing::DeviceBuffer;

constexpr DType kHalfDTypes[] = {DType::kFloat16, DType::kBFloat16};

Problem HalfMatMul(DType dtype, bool float32_output, int64_t m, int64_t n, int64_t k) {
  Problem p;
  p.op = Op::kMatMul;
  p.dtype = dtype;
  p.float32_output = float32_output;
  p.m = m, p.n = n, p.k = k;
  return p;
}

std::string Describe(const Problem& p) {
  return std::string(DTypeName(p.dtype)) + " -> " + DTypeName(OutputDType(p)) +
         " m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
}

uint16_t Bits(DType dtype, float v) {
  return dtype == DType::kFloat16 ? ToFloat16(v).bits : ToBFloat16(v).bits;
}

// 16-bit elements of `dtype` from floats (each rounded to nearest even).
std::vector<char> HalfMatrix(DType dtype, const std::vector<float>& values) {
  std::vector<char> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = Bits(dtype, values[i]);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  }
  return bytes;
}

std::vector<char> RandomHalfMatrix(DType dtype, int64_t elements, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(elements));
  for (float& v : values) v = dist(rng);
  return HalfMatrix(dtype, values);
}

std::vector<const Variant*> HalfVariants(DType dtype) {
  std::vector<const Variant*> out;
  for (const Variant* v : DefaultRegistry().List(Op::kMatMul, Backend::kCuda)) {
    if (v->Supports(dtype)) out.push_back(v);
  }
  return out;
}

class HalfMatMulTest : public testing::CudaSuite<HalfMatMulTest> {
 protected:
  // Launches `v` once on a NaN-poisoned output; `a_offset` bytes put `a`
  // that far into its allocation (2: not 16-byte aligned). Returns the
  // output bytes, empty on failure (recorded).
  std::vector<char> Launch(const Variant& v, const Problem& p, const std::vector<char>& a,
                           const std::vector<char>& b, size_t a_offset = 0) {
    const size_t out_bytes = size_t(OutputBytes(p));
    DeviceBuffer da(a.size() + a_offset), db(b.size()), dout(out_bytes), dws(v.WorkspaceBytes(p));
    char* a_at = static_cast<char*>(da.get()) + a_offset;
    EXPECT_EQ(cudaMemcpyAsync(a_at, a.data(), a.size(), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(db.get(), b.data(), b.size(), cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    // All-ones bytes are a NaN in every dtype.
    EXPECT_EQ(cudaMemsetAsync(dout.get(), 0xFF, out_bytes, stream_), cudaSuccess);
    Buffers buf;
    buf.a = a_at;
    buf.b = db.get();
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
    EXPECT_EQ(cudaMemcpy(out.data(), dout.get(), out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    if (!status.ok() || sync != cudaSuccess) return {};
    return out;
  }

  // Every 16-bit variant on (a, b) against the float64 reference.
  void CheckAll(const Problem& p, const std::vector<char>& a, const std::vector<char>& b,
                size_t a_offset = 0) {
    const std::vector<double> reference = ReferenceResult(p, a.data(), b.data());
    for (const Variant* v : HalfVariants(p.dtype)) {
      SCOPED_TRACE("variant " + v->name + ", " + Describe(p) + (a_offset ? ", a unaligned" : "") +
                   ", seed " + std::to_string(seed_));
      const std::vector<char> out = Launch(*v, p, a, b, a_offset);
      if (out.empty()) continue;
      const CheckResult check =
          CheckAgainstReference(p, v->reduced_precision, a.data(), out.data(), reference);
      EXPECT_TRUE(check.ok) << check.message << " (max error " << check.max_rel_error
                            << ", tolerance " << check.tolerance << ")";
    }
  }

  // Every 16-bit variant's bytes against the CPU variant's (for inputs whose
  // float sums are exact, where the contract asks for the same bits).
  void ExpectSameBitsAsCpu(const Problem& p, const std::vector<char>& a,
                           const std::vector<char>& b) {
    const Variant* cpu = DefaultRegistry().Find(Op::kMatMul, Backend::kCpu, "cpu_reference");
    ASSERT_NE(cpu, nullptr);
    std::vector<char> expected(size_t(OutputBytes(p)));
    Buffers host;
    host.a = a.data();
    host.b = b.data();
    host.out = expected.data();
    ASSERT_TRUE(cpu->launch(p, host, LaunchContext{}).ok());
    const int64_t size = ElementSize(OutputDType(p));
    for (const Variant* v : HalfVariants(p.dtype)) {
      SCOPED_TRACE("variant " + v->name + ", " + Describe(p) + ", seed " + std::to_string(seed_));
      const std::vector<char> out = Launch(*v, p, a, b);
      if (out.empty()) continue;
      int64_t mismatches = 0, first = -1;
      for (int64_t i = 0; i < OutputElements(p); ++i) {
        if (std::memcmp(out.data() + i * size, expected.data() + i * size, size_t(size)) != 0) {
          if (first < 0) first = i;
          ++mismatches;
        }
      }
      EXPECT_EQ(mismatches, 0) << "first at [" << first / p.n << "," << first % p.n << "]";
    }
  }
};

// Needs no GPU: the registry only.
TEST(HalfMatMulLadder, ListsTheVariantsThatTakeSixteenBits) {
  for (DType dtype : kHalfDTypes) {
    std::set<std::string> names;
    for (const Variant* v : HalfVariants(dtype)) names.insert(v->name);
    for (const char* name : {"naive", "tiled16", "tiled32", "tiled32_padded", "wmma", "cublas"}) {
      EXPECT_TRUE(names.count(name)) << name << " " << DTypeName(dtype);
    }
  }
  const Variant* wmma = DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, "wmma");
  ASSERT_NE(wmma, nullptr);
  EXPECT_FALSE(wmma->Supports(DType::kFloat32));
  EXPECT_FALSE(wmma->Supports(DType::kFloat64));
  EXPECT_EQ(wmma->lesson.before, "tiled32");
}

// Needs no GPU: the registry refuses before anything is launched.
TEST(HalfMatMulLadder, AVariantAskedForADTypeItsRowDoesNotListAnswersAnError) {
  struct Case {
    const char* variant;
    DType dtype;
    bool float32_output;
  };
  for (const Case& c :
       {Case{"register_tiled", DType::kFloat16, false},
        Case{"register_tiled", DType::kBFloat16, true},
        Case{"cublas_tf32", DType::kBFloat16, false}, Case{"wmma", DType::kFloat32, false},
        Case{"wmma", DType::kFloat64, false}, Case{"wmma", DType::kFloat32, true},
        Case{"cublas", DType::kFloat32, true}, Case{"tiled32", DType::kFloat64, true}}) {
    const Variant* v = DefaultRegistry().Find(Op::kMatMul, Backend::kCuda, c.variant);
    ASSERT_NE(v, nullptr) << c.variant;
    const Problem p = HalfMatMul(c.dtype, c.float32_output, 4, 4, 4);
    const absl::Status s = v->launch(p, Buffers{}, LaunchContext{});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.variant << " " << DTypeName(c.dtype) << ": " << s;
  }
}

TEST_F(HalfMatMulTest, EveryVariantIsWithinTheDTypesToleranceAtOddShapes) {
  std::mt19937_64 rng(seed_ + 1);
  struct Shape {
    int64_t m, n, k;
  };
  // (64, 64, 64), (3, 8, 24) and (200, 136, 1000) have k and n multiples of
  // 8: wmma stages them with cp.async (the last two with partial edge tiles
  // and a k-tail); the others element by element.
  for (const Shape& s : {Shape{1, 1, 1}, Shape{17, 33, 5}, Shape{257, 129, 1000}, Shape{64, 64, 64},
                         Shape{3, 8, 24}, Shape{200, 136, 1000}, Shape{129, 257, 47}}) {
    for (DType dtype : kHalfDTypes) {
      const std::vector<char> a = RandomHalfMatrix(dtype, s.m * s.k, rng);
      const std::vector<char> b = RandomHalfMatrix(dtype, s.k * s.n, rng);
      for (bool float32_output : {false, true}) {
        CheckAll(HalfMatMul(dtype, float32_output, s.m, s.n, s.k), a, b);
      }
    }
  }
}

// An `a` 2 bytes past 16-byte alignment: cp.async would need 16; the
// kernels must fall back, not fault or misread.
TEST_F(HalfMatMulTest, AnUnalignedInputIsStagedElementByElement) {
  std::mt19937_64 rng(seed_ + 2);
  for (DType dtype : kHalfDTypes) {
    const std::vector<char> a = RandomHalfMatrix(dtype, 136 * 64, rng);
    const std::vector<char> b = RandomHalfMatrix(dtype, 64 * 128, rng);
    CheckAll(HalfMatMul(dtype, false, 136, 128, 64), a, b, /*a_offset=*/2);
  }
}

// Every wmma configuration the bench's ablation times (so that the ladder
// may take any of them), BF16 in and out, with cp.async staging (k and n
// multiples of 8) and element-wise, at edge tiles and k-tails.
TEST_F(HalfMatMulTest, EveryWmmaConfigurationIsWithinTolerance) {
  std::mt19937_64 rng(seed_ + 5);
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{200, 264, 1000}, Shape{257, 129, 1000}, Shape{1, 8, 8}}) {
    const Problem p = HalfMatMul(DType::kBFloat16, false, s.m, s.n, s.k);
    const std::vector<char> a = RandomHalfMatrix(p.dtype, s.m * s.k, rng);
    const std::vector<char> b = RandomHalfMatrix(p.dtype, s.k * s.n, rng);
    const std::vector<double> reference = ReferenceResult(p, a.data(), b.data());
    DeviceBuffer da(a.size()), db(b.size()), dout(size_t(OutputBytes(p)));
    ASSERT_EQ(cudaMemcpy(da.get(), a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(db.get(), b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    for (const cuda::WmmaConfig& c : cuda::kWmmaConfigs) {
      SCOPED_TRACE(Describe(p) + ", wmma bk " + std::to_string(c.bk) + " stages " +
                   std::to_string(c.stages) + " blocks " + std::to_string(c.min_blocks) +
                   " warp_n " + std::to_string(c.warp_n) + ", seed " + std::to_string(seed_));
      ASSERT_EQ(cudaMemset(dout.get(), 0xFF, dout.bytes()), cudaSuccess);
      ASSERT_EQ(cuda::LaunchWmmaMatMulConfig(static_cast<const __nv_bfloat16*>(da.get()),
                                             static_cast<const __nv_bfloat16*>(db.get()),
                                             static_cast<__nv_bfloat16*>(dout.get()), s.m, s.n, s.k,
                                             c, stream_),
                cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      std::vector<char> out(dout.bytes());
      ASSERT_EQ(cudaMemcpy(out.data(), dout.get(), out.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      const CheckResult check = CheckAgainstReference(p, false, a.data(), out.data(), reference);
      EXPECT_TRUE(check.ok) << check.message;
    }
  }
}

// With k = 1 each output is one product, exact in float: rounded once, it
// must have the CPU variant's bits.
TEST_F(HalfMatMulTest, KEqualsOneIsBitExactAgainstTheCpu) {
  std::mt19937_64 rng(seed_ + 3);
  for (DType dtype : kHalfDTypes) {
    const std::vector<char> a = RandomHalfMatrix(dtype, 37, rng);
    const std::vector<char> b = RandomHalfMatrix(dtype, 45, rng);
    for (bool float32_output : {false, true}) {
      ExpectSameBitsAsCpu(HalfMatMul(dtype, float32_output, 37, 45, 1), a, b);
    }
  }
}

// Products of FP16 values beyond 65504 (256 * 256 = 65536) are exact in the
// float accumulator: rows whose sums stay beyond the range round to +-inf,
// rows whose products cancel give 0, not inf - inf = NaN, and a float32
// output holds the sums themselves. Every sum is exact, so the bits must be
// the CPU variant's.
TEST_F(HalfMatMulTest, ProductsBeyondTheFp16RangeAccumulateInFloat) {
  const int64_t m = 6, n = 40, k = 24;
  std::vector<float> av(size_t(m * k)), bv(size_t(k * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const float values[] = {
          256.0f, -256.0f, kk % 2 ? 256.0f : -256.0f, 1.0f, kk == 0 ? 255.0f : 0.0f, 60000.0f};
      av[size_t(i * k + kk)] = values[i];
    }
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < n; ++j)
      bv[size_t(kk * n + j)] = j % 3 == 0 ? 256.0f : j % 3 == 1 ? -1.0f : 0.5f;
  }
  const std::vector<char> a = HalfMatrix(DType::kFloat16, av), b = HalfMatrix(DType::kFloat16, bv);
  for (bool float32_output : {false, true}) {
    ExpectSameBitsAsCpu(HalfMatMul(DType::kFloat16, float32_output, m, n, k), a, b);
  }
  // BF16 products beyond float's range are inf in the accumulator already.
  for (float& v : av) v = v == 60000.0f ? 0x1p100f : v;
  for (float& v : bv) v = v == 256.0f ? 0x1p100f : v;
  const std::vector<char> ab = HalfMatrix(DType::kBFloat16, av);
  const std::vector<char> bb = HalfMatrix(DType::kBFloat16, bv);
  for (bool float32_output : {false, true}) {
    const Problem p = HalfMatMul(DType::kBFloat16, float32_output, m, n, k);
    // Row 5 meets 2^200 = inf in every third column; the rest stays finite.
    ExpectSameBitsAsCpu(p, ab, bb);
  }
}

// A NaN in A poisons its row, one in B its column; +inf times a zero of B
// is NaN, times anything else +-inf. The reference has the same NaNs and
// infinities, which CheckAgainstReference matches exactly.
TEST_F(HalfMatMulTest, NaNAndInfinityPropagate) {
  std::mt19937_64 rng(seed_ + 4);
  const int64_t m = 140, n = 136, k = 72;  // cp.async staging in wmma
  for (DType dtype : kHalfDTypes) {
    std::vector<char> a = RandomHalfMatrix(dtype, m * k, rng);
    std::vector<char> b = RandomHalfMatrix(dtype, k * n, rng);
    auto set = [dtype](std::vector<char>& bytes, int64_t i, float v) {
      const uint16_t bits = Bits(dtype, v);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    };
    set(a, 2 * k + 3, std::numeric_limits<float>::quiet_NaN());
    set(b, 5 * n + 7, std::numeric_limits<float>::quiet_NaN());
    set(a, 130 * k + 0, std::numeric_limits<float>::infinity());
    set(b, 0 * n + 11, 0.0f);
    set(b, 0 * n + 135, 0.0f);
    for (bool float32_output : {false, true}) {
      CheckAll(HalfMatMul(dtype, float32_output, m, n, k), a, b);
    }
  }
}

}  // namespace
}  // namespace gpucompute::kernels
