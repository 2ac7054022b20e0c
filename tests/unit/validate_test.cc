// Every validation row of docs/contract.md's status-code table, as pure functions:
// the code, and a message naming the field and the numbers.
#include <gtest/gtest.h>

#include "server/grpc/validate.h"

namespace gpucompute::server {
namespace {

v1::Matrix Mat(int64_t rows, int64_t cols, v1::DType dtype = v1::DTYPE_FLOAT32) {
  v1::Matrix m;
  m.set_dtype(dtype);
  m.set_rows(rows);
  m.set_cols(cols);
  int64_t elements = 0;
  if (rows > 0 && cols > 0 && !__builtin_mul_overflow(rows, cols, &elements) &&
      elements < (1 << 24)) {
    // An unknown dtype (-1) gets 4-byte elements: its size is not what is tested.
    const int64_t element = MatrixBytes(1, 1, dtype);
    m.mutable_data()->assign(rows * cols * (element > 0 ? element : 4), '\1');
  }
  return m;
}

v1::MatMulRequest MatMul(v1::Matrix a, v1::Matrix b) {
  v1::MatMulRequest r;
  *r.mutable_a() = std::move(a);
  *r.mutable_b() = std::move(b);
  return r;
}

void ExpectError(const absl::Status& s, absl::StatusCode code, std::vector<std::string> parts) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& part : parts) {
    EXPECT_NE(s.message().find(part), absl::string_view::npos)
        << "message \"" << s.message() << "\" lacks \"" << part << "\"";
  }
}

const Limits kLimits{1 << 20};

TEST(Validate, AcceptsAWellFormedMatMul) {
  auto p = ValidateMatMul(MatMul(Mat(3, 4), Mat(4, 5)), kLimits);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->m, 3);
  EXPECT_EQ(p->k, 4);
  EXPECT_EQ(p->n, 5);
}

TEST(Validate, SixteenBitInputsAndTheirOutputDType) {
  for (v1::DType dtype : {v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16}) {
    v1::MatMulRequest mm = MatMul(Mat(3, 4, dtype), Mat(4, 5, dtype));
    auto p = ValidateMatMul(mm, kLimits);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(kernels::IsHalfPrecision(p->dtype));
    EXPECT_FALSE(p->float32_output);
    EXPECT_EQ(kernels::OutputBytes(*p), 3 * 5 * 2);
    mm.set_output_dtype(v1::DTYPE_FLOAT32);
    p = ValidateMatMul(mm, kLimits);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->float32_output);
    EXPECT_EQ(kernels::OutputBytes(*p), 3 * 5 * 4);
    mm.set_output_dtype(dtype);  // its own dtype, said explicitly
    EXPECT_TRUE(ValidateMatMul(mm, kLimits).ok());
    mm.set_output_dtype(v1::DTYPE_FLOAT64);
    ExpectError(ValidateMatMul(mm, kLimits).status(), absl::StatusCode::kInvalidArgument,
                {"output_dtype", "DTYPE_FLOAT64", "DTYPE_FLOAT32"});
    v1::ReduceRequest r;
    *r.mutable_input() = Mat(6, 7, dtype);
    r.set_output_dtype(v1::DTYPE_FLOAT32);
    p = ValidateReduce(r, kLimits);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->float32_output);
  }
  // A 16-bit or a wider output for 32- and 64-bit inputs, and an unknown value.
  for (v1::DType out : {v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT64}) {
    v1::MatMulRequest mm = MatMul(Mat(3, 4), Mat(4, 5));
    mm.set_output_dtype(out);
    ExpectError(ValidateMatMul(mm, kLimits).status(), absl::StatusCode::kInvalidArgument,
                {"output_dtype", v1::DType_Name(out), "float32 inputs"});
  }
  v1::ReduceRequest r;
  *r.mutable_input() = Mat(2, 2, v1::DTYPE_FLOAT16);
  r.set_output_dtype(static_cast<v1::DType>(9));
  ExpectError(ValidateReduce(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"output_dtype", "9"});
  // Mixed 16-bit dtypes.
  ExpectError(
      ValidateMatMul(MatMul(Mat(3, 4, v1::DTYPE_FLOAT16), Mat(4, 5, v1::DTYPE_BFLOAT16)), kLimits)
          .status(),
      absl::StatusCode::kInvalidArgument, {"b.dtype", "DTYPE_BFLOAT16", "DTYPE_FLOAT16"});
}

TEST(Validate, DTypeUnsetOrUnknown) {
  ExpectError(ValidateMatMul(MatMul(Mat(3, 4, v1::DTYPE_UNSPECIFIED), Mat(4, 5)), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"a.dtype", "DTYPE_UNSPECIFIED"});
  auto b = Mat(4, 5);
  b.set_dtype(static_cast<v1::DType>(7));
  ExpectError(ValidateMatMul(MatMul(Mat(3, 4), b), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"b.dtype", "7"});
}

TEST(Validate, RowsOrColsBelowOne) {
  ExpectError(ValidateMatMul(MatMul(Mat(0, 4), Mat(4, 5)), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"a.rows", "got 0"});
  v1::TransposeRequest t;
  *t.mutable_input() = Mat(3, -2);
  ExpectError(ValidateTranspose(t, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"input.cols", "got -2"});
}

TEST(Validate, DataLengthMismatch) {
  auto a = Mat(3, 4);
  a.mutable_data()->resize(40);
  ExpectError(ValidateMatMul(MatMul(a, Mat(4, 5)), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"a.data", "48", "40"});
  v1::ReduceRequest r;
  *r.mutable_input() = Mat(2, 2, v1::DTYPE_FLOAT64);
  r.mutable_input()->mutable_data()->append("x");
  ExpectError(ValidateReduce(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"input.data", "32", "33"});
}

TEST(Validate, DTypesDiffer) {
  ExpectError(ValidateMatMul(MatMul(Mat(3, 4), Mat(4, 5, v1::DTYPE_FLOAT64)), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"b.dtype", "DTYPE_FLOAT64", "DTYPE_FLOAT32"});
}

TEST(Validate, InnerDimensionsDiffer) {
  ExpectError(ValidateMatMul(MatMul(Mat(3, 4), Mat(5, 6)), kLimits).status(),
              absl::StatusCode::kInvalidArgument, {"b.rows", "a.cols = 4", "b.rows = 5"});
}

TEST(Validate, MatrixAboveMaxMatrixBytes) {
  ExpectError(ValidateMatMul(MatMul(Mat(1024, 1024), Mat(1024, 1)), kLimits).status(),
              absl::StatusCode::kResourceExhausted, {"a", "4194304", "max_matrix_bytes 1048576"});
  // A shape whose byte size overflows int64 is a bad argument, not a big one
  // (docs/contract.md), refused before anything is allocated.
  ExpectError(
      ValidateMatMul(MatMul(Mat(int64_t{1} << 40, int64_t{1} << 40), Mat(1, 1)), kLimits).status(),
      absl::StatusCode::kInvalidArgument, {"a", "overflows int64"});
  // A small a and b can still ask for a huge result.
  ExpectError(
      ValidateMatMul(MatMul(Mat(100000, 1), Mat(1, 100000)), Limits{int64_t{1} << 30}).status(),
      absl::StatusCode::kResourceExhausted, {"c (result)", "100000 x 100000"});
}

TEST(Validate, ReduceOpAndAxis) {
  v1::ReduceRequest r;
  *r.mutable_input() = Mat(2, 3);
  r.set_op(static_cast<v1::ReduceOp>(9));
  ExpectError(ValidateReduce(r, kLimits).status(), absl::StatusCode::kInvalidArgument, {"op", "9"});
  r.set_op(v1::REDUCE_OP_MAX);
  r.set_axis(static_cast<v1::ReduceAxis>(5));
  ExpectError(ValidateReduce(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"axis", "5"});
  r.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
  auto p = ValidateReduce(r, kLimits);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(kernels::OutputCols(*p), 3);
}

TEST(Validate, Profile) {
  v1::ProfileRequest r;
  ExpectError(ValidateProfile(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"op", "OP_UNSPECIFIED"});
  r.set_op(v1::OP_MATMUL);
  ExpectError(ValidateProfile(r, kLimits).status(), absl::StatusCode::kInvalidArgument, {"dtype"});
  r.set_dtype(v1::DTYPE_FLOAT32);
  r.set_m(8);
  r.set_n(8);
  ExpectError(ValidateProfile(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"k", "got 0"});
  r.set_k(8);
  r.set_repetitions(-1);
  ExpectError(ValidateProfile(r, kLimits).status(), absl::StatusCode::kInvalidArgument,
              {"repetitions", "-1"});
  r.set_repetitions(3);
  EXPECT_TRUE(ValidateProfile(r, kLimits).ok());
  r.set_k(1 << 20);
  ExpectError(ValidateProfile(r, kLimits).status(), absl::StatusCode::kResourceExhausted,
              {"a (m x k)", "max_matrix_bytes"});
}

}  // namespace
}  // namespace gpucompute::server
