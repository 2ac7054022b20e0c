// FP16 and BF16 end to end through the C++ client and the real server (the
// CPU backend in CI; GPUCOMPUTE_TEST_BACKEND=cuda on a GPU host): every
// variant GetServerInfo lists for a 16-bit dtype, on every op at odd shapes,
// checked against the float64 reference of the 16-bit inputs within Part 3's
// tolerances; float32 outputs; tensors and shared memory holding the output
// dtype; and the refusals (a variant without the dtype, mixed dtypes, an
// output_dtype the contract does not allow).
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/shared_memory.h"
#include "support/client_suite.h"
#include "support/server_process.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

constexpr DType kHalfTypes[] = {DType::kFloat16, DType::kBFloat16};

class HalfPrecisionTest : public testing::ClientSuite<HalfPrecisionTest> {
 public:
  static std::vector<std::string> ServerFlags() {
    return {testing::BackendFlag(), "--allow_shared_memory", "--metrics_listen="};
  }

 protected:
  void SetUp() override {
    ClientSuite::SetUp();
    if (HasFatalFailure()) return;
    absl::StatusOr<v1::ServerInfo> info = client_->GetServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    info_ = std::move(*info);
  }

  // Variants of `op` that list `dtype`, plus "" (auto).
  std::vector<std::string> VariantsOf(v1::Op op, DType dtype) const {
    std::vector<std::string> out = {""};
    for (const v1::VariantInfo& v : info_.variants()) {
      if (v.op() != op) continue;
      for (int d : v.dtypes()) {
        if (d == ToProto(dtype)) out.push_back(v.name());
      }
    }
    return out;
  }

  v1::ServerInfo info_;
};

kernels::Problem ProblemOf(v1::Op op, const Matrix& a, const Matrix* b, bool f32,
                           kernels::ReduceOp rop = kernels::ReduceOp::kSum,
                           kernels::ReduceAxis axis = kernels::ReduceAxis::kAll) {
  kernels::Problem p;
  p.op = op == v1::OP_MATMUL      ? kernels::Op::kMatMul
         : op == v1::OP_TRANSPOSE ? kernels::Op::kTranspose
                                  : kernels::Op::kReduce;
  p.dtype = a.dtype();
  p.m = a.rows();
  p.k = op == v1::OP_MATMUL ? a.cols() : 1;
  p.n = op == v1::OP_MATMUL ? b->cols() : a.cols();
  p.reduce_op = rop;
  p.reduce_axis = axis;
  p.float32_output = f32;
  return p;
}

// The result against the float64 reference of the inputs, within the output
// dtype's tolerance; `variant` asked for, `report` what ran.
void ExpectMeetsContract(const kernels::Problem& p, const Matrix& a, const Matrix* b,
                         const absl::StatusOr<OpResult>& r, const std::string& variant) {
  ASSERT_TRUE(r.ok()) << r.status();
  const Matrix& out = r->output;
  EXPECT_EQ(out.dtype(), kernels::OutputDType(p));
  ASSERT_EQ(out.byte_size(), kernels::OutputBytes(p));
  if (!variant.empty()) {
    EXPECT_EQ(r->report.variant(), variant);
  }
  const std::vector<double> ref =
      kernels::ReferenceResult(p, a.bytes().data(), b ? b->bytes().data() : nullptr);
  const kernels::CheckResult check =
      kernels::CheckAgainstReference(p, false, a.bytes().data(), out.bytes().data(), ref);
  EXPECT_TRUE(check.ok) << r->report.variant() << ": " << check.message;
}

TEST_F(HalfPrecisionTest, EveryVariantOfEveryOpAtOddShapes) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed, " (rerun with GPUCOMPUTE_TEST_SEED)"));
  struct Shape {
    int64_t m, k, n;
  };
  for (DType dtype : kHalfTypes) {
    for (const Shape& s : {Shape{1, 1, 1}, Shape{17, 5, 33}, Shape{257, 1000, 129}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", s.m, "x", s.k, "x", s.n));
      Matrix a = *Matrix::Random(dtype, s.m, s.k, seed);
      Matrix b = *Matrix::Random(dtype, s.k, s.n, seed + 1);
      for (const std::string& v : VariantsOf(v1::OP_MATMUL, dtype)) {
        for (bool f32 : {false, true}) {
          MatMulOptions options{.variant = v};
          if (f32) options.output_dtype = DType::kFloat32;
          ExpectMeetsContract(ProblemOf(v1::OP_MATMUL, a, &b, f32), a, &b,
                              client_->MatMul(a, b, options), v);
        }
      }
      Matrix x = *Matrix::Random(dtype, s.m, s.n, seed + 2);
      for (const std::string& v : VariantsOf(v1::OP_TRANSPOSE, dtype)) {
        absl::StatusOr<OpResult> t = client_->Transpose(x, v);
        ExpectMeetsContract(ProblemOf(v1::OP_TRANSPOSE, x, nullptr, false), x, nullptr, t, v);
      }
      for (const std::string& v : VariantsOf(v1::OP_REDUCE, dtype)) {
        for (auto [rop, wire_op] : {std::pair{kernels::ReduceOp::kSum, v1::REDUCE_OP_SUM},
                                    {kernels::ReduceOp::kMax, v1::REDUCE_OP_MAX},
                                    {kernels::ReduceOp::kMean, v1::REDUCE_OP_MEAN}}) {
          for (auto [axis, wire_axis] :
               {std::pair{kernels::ReduceAxis::kAll, v1::REDUCE_AXIS_ALL},
                {kernels::ReduceAxis::kPerRow, v1::REDUCE_AXIS_PER_ROW},
                {kernels::ReduceAxis::kPerColumn, v1::REDUCE_AXIS_PER_COLUMN}}) {
            for (bool f32 : {false, true}) {
              OpOptions options{.variant = v};
              if (f32) options.output_dtype = DType::kFloat32;
              ExpectMeetsContract(ProblemOf(v1::OP_REDUCE, x, nullptr, f32, rop, axis), x, nullptr,
                                  client_->Reduce(x, wire_op, wire_axis, options), v);
            }
          }
        }
      }
    }
  }
}

TEST_F(HalfPrecisionTest, TensorsAndSharedMemoryHoldTheOutputDType) {
  for (DType dtype : kHalfTypes) {
    SCOPED_TRACE(DTypeName(dtype));
    Matrix a = *Matrix::Random(dtype, 12, 7, 3);
    Matrix b = *Matrix::Random(dtype, 7, 5, 4);
    absl::StatusOr<Tensor> ta = client_->Upload(a);
    ASSERT_TRUE(ta.ok()) << ta.status();
    EXPECT_EQ(ta->dtype(), dtype);
    absl::StatusOr<Matrix> back = ta->Download();
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->bytes(), a.bytes());  // bit for bit
    // A kept float32 result of 16-bit operands.
    MatMulOptions keep_f32;
    keep_f32.output_dtype = DType::kFloat32;
    keep_f32.keep = true;
    absl::StatusOr<OpResult> kept = client_->MatMul(*ta, b, keep_f32);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_EQ(kept->tensor.dtype(), DType::kFloat32);
    absl::StatusOr<Matrix> c = kept->tensor.Download();
    ASSERT_TRUE(c.ok()) << c.status();
    const kernels::Problem p = ProblemOf(v1::OP_MATMUL, a, &b, true);
    const std::vector<double> ref = kernels::ReferenceResult(p, a.bytes().data(), b.bytes().data());
    EXPECT_TRUE(
        kernels::CheckAgainstReference(p, false, a.bytes().data(), c->bytes().data(), ref).ok);
    // The transpose of the tensor into a shared-memory view of its dtype.
    absl::StatusOr<SharedMemoryRegion> region = SharedMemoryRegion::Create(*client_, 4096);
    ASSERT_TRUE(region.ok()) << region.status();
    absl::StatusOr<SharedMemoryView> view = region->View(dtype, 7, 12);
    ASSERT_TRUE(view.ok()) << view.status();
    OpOptions into;
    into.output = *view;
    ASSERT_TRUE(client_->Transpose(*ta, into).ok());
    const char* t = static_cast<const char*>(region->data());
    for (int r = 0; r < 12; ++r) {
      for (int col = 0; col < 7; ++col) {
        ASSERT_EQ(0, std::memcmp(t + 2 * (col * 12 + r), a.bytes().data() + 2 * (r * 7 + col), 2));
      }
    }
  }
}

TEST_F(HalfPrecisionTest, RefusalsNameTheFieldAndTheDTypes) {
  Matrix h = *Matrix::Random(DType::kFloat16, 4, 4, 1);
  Matrix bf = *Matrix::Random(DType::kBFloat16, 4, 4, 2);
  Matrix f = *Matrix::Random(DType::kFloat32, 4, 4, 3);
  absl::StatusOr<OpResult> mixed = client_->MatMul(h, bf);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mixed.status().message().find("b.dtype"), std::string::npos) << mixed.status();
  MatMulOptions options;
  options.output_dtype = DType::kFloat16;
  absl::StatusOr<OpResult> narrowing = client_->MatMul(f, f, options);
  EXPECT_EQ(narrowing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(narrowing.status().message().find("output_dtype"), std::string::npos)
      << narrowing.status();
  options.output_dtype = DType::kFloat64;
  absl::StatusOr<OpResult> widening = client_->MatMul(h, h, options);
  EXPECT_EQ(widening.status().code(), absl::StatusCode::kInvalidArgument) << widening.status();
  // A variant that does not list the dtype (on a server that has one).
  for (const v1::VariantInfo& v : info_.variants()) {
    if (v.op() != v1::OP_MATMUL) continue;
    bool takes_half = false;
    for (int d : v.dtypes()) takes_half |= d == v1::DTYPE_FLOAT16;
    if (takes_half) continue;
    absl::StatusOr<OpResult> r = client_->MatMul(h, h, {.variant = v.name()});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << v.name();
    EXPECT_NE(r.status().message().find("FLOAT16"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace gpucompute
