#include "server/grpc/validate.h"

#include "absl/strings/str_cat.h"
#include "server/grpc/convert.h"

namespace gpucompute::server {
namespace {

using kernels::DType;
using kernels::Problem;

// rows * cols * element size, or -1 when that overflows int64.
int64_t MatrixBytes(int64_t rows, int64_t cols, DType dtype) {
  int64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(rows, cols, &elements) ||
      __builtin_mul_overflow(elements, kernels::ElementSize(dtype), &bytes)) {
    return -1;
  }
  return bytes;
}

std::string Shape(int64_t rows, int64_t cols, DType dtype) {
  return absl::StrCat(rows, " x ", cols, " ", kernels::DTypeName(dtype));
}

absl::Status CheckDType(int dtype, const std::string& field) {
  if (FromProto(static_cast<v1::DType>(dtype))) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be one of ", ProtoDTypeNames(), ", got ", ProtoDTypeName(dtype)));
}

absl::Status CheckDim(int64_t value, const std::string& field) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": must be >= 1, got ", value));
}

// A matrix of this shape fits under max_matrix_bytes; `what` names it.
absl::Status CheckSize(int64_t rows, int64_t cols, DType dtype, const std::string& what,
                       const Limits& limits) {
  const int64_t bytes = MatrixBytes(rows, cols, dtype);
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", Shape(rows, cols, dtype),
                                                   " matrix: its byte size overflows int64"));
  }
  if (bytes <= limits.max_matrix_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(what, ": ", Shape(rows, cols, dtype), " matrix is ", bytes,
                   " bytes, above max_matrix_bytes ", limits.max_matrix_bytes));
}

// A tensor of this shape is small enough for an op; `what` names it.
absl::Status CheckOpElements(int64_t rows, int64_t cols, DType dtype, const std::string& what) {
  if (rows <= kMaxOpElements / cols) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": ", Shape(rows, cols, dtype), " tensor has more than ", kMaxOpElements,
      " elements, the most an op takes (Upload and Download take any size the budget admits)"));
}

// Checks one input matrix and returns its dtype.
absl::StatusOr<DType> CheckMatrix(const MatrixShape& m, const std::string& name,
                                  const Limits& limits) {
  if (auto s = CheckDType(m.dtype, name + ".dtype"); !s.ok()) return s;
  const DType dtype = *FromProto(static_cast<v1::DType>(m.dtype));
  if (auto s = CheckDim(m.rows, name + ".rows"); !s.ok()) return s;
  if (auto s = CheckDim(m.cols, name + ".cols"); !s.ok()) return s;
  if (m.resident) {
    if (auto s = CheckOpElements(m.rows, m.cols, dtype, name); !s.ok()) return s;
  } else if (auto s = CheckSize(m.rows, m.cols, dtype, name, limits); !s.ok()) {
    return s;
  }
  const int64_t want = MatrixBytes(m.rows, m.cols, dtype);
  if (m.data_bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ".data: ", Shape(m.rows, m.cols, dtype), " needs ", want, " bytes (", m.rows, " * ",
        m.cols, " * ", kernels::ElementSize(dtype), "), got ", m.data_bytes));
  }
  return dtype;
}

absl::Status CheckOutputSize(const Problem& p, const std::string& name, const Limits& limits,
                             bool kept = false) {
  if (kept) {
    return CheckOpElements(kernels::OutputRows(p), kernels::OutputCols(p), kernels::OutputDType(p),
                           name + " (kept result)");
  }
  return CheckSize(kernels::OutputRows(p), kernels::OutputCols(p), kernels::OutputDType(p),
                   name + " (result)", limits);
}

// output_dtype of a MatMul or Reduce (docs/contract.md, "Half precision"):
// 0 or the inputs' dtype, or FLOAT32 for 16-bit inputs.
absl::Status ApplyOutputDType(int output_dtype, Problem& p) {
  if (output_dtype == 0 || output_dtype == ToProto(p.dtype)) return absl::OkStatus();
  if (output_dtype == v1::DTYPE_FLOAT32 && kernels::IsHalfPrecision(p.dtype)) {
    p.float32_output = true;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "output_dtype: ", ProtoDTypeName(output_dtype), " for ", kernels::DTypeName(p.dtype),
      " inputs; must be DTYPE_UNSPECIFIED (the inputs' dtype), ", ProtoDTypeName(ToProto(p.dtype)),
      kernels::IsHalfPrecision(p.dtype) ? " or DTYPE_FLOAT32" : ""));
}

}  // namespace

MatrixShape MatrixShape::Of(const v1::Matrix& m) {
  return MatrixShape{m.dtype(), m.rows(), m.cols(), int64_t(m.data().size())};
}

int64_t MatrixBytes(int64_t rows, int64_t cols, int dtype) {
  const auto d = FromProto(static_cast<v1::DType>(dtype));
  return d ? MatrixBytes(rows, cols, *d) : -1;
}

absl::StatusOr<Problem> ValidateMatMul(const MatrixShape& a, const MatrixShape& b,
                                       const Limits& limits, bool output_kept, int output_dtype) {
  auto a_dtype = CheckMatrix(a, "a", limits);
  if (!a_dtype.ok()) return a_dtype.status();
  auto b_dtype = CheckMatrix(b, "b", limits);
  if (!b_dtype.ok()) return b_dtype.status();
  if (*a_dtype != *b_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "b.dtype: ", ProtoDTypeName(b.dtype), " differs from a.dtype ", ProtoDTypeName(a.dtype)));
  }
  if (a.cols != b.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "b.rows: inner dimensions differ: a is ", a.rows, " x ", a.cols, " (a.cols = ", a.cols,
        ") but b is ", b.rows, " x ", b.cols, " (b.rows = ", b.rows, ")"));
  }
  Problem p;
  p.op = kernels::Op::kMatMul;
  p.dtype = *a_dtype;
  p.m = a.rows;
  p.k = a.cols;
  p.n = b.cols;
  if (auto s = ApplyOutputDType(output_dtype, p); !s.ok()) return s;
  if (auto s = CheckOutputSize(p, "c", limits, output_kept); !s.ok()) return s;
  return p;
}

absl::StatusOr<Problem> ValidateTranspose(const MatrixShape& input, const Limits& limits,
                                          bool output_kept) {
  auto dtype = CheckMatrix(input, "input", limits);
  if (!dtype.ok()) return dtype.status();
  Problem p;
  p.op = kernels::Op::kTranspose;
  p.dtype = *dtype;
  p.m = input.rows;
  p.n = input.cols;
  // Only a tensor's result can outgrow max_matrix_bytes: an inline input
  // was already held to it.
  if (auto s = CheckOutputSize(p, "output", limits, output_kept); !s.ok()) return s;
  return p;
}

absl::StatusOr<Problem> ValidateReduce(const MatrixShape& input, int reduce_op, int reduce_axis,
                                       const Limits& limits, bool output_kept, int output_dtype) {
  auto dtype = CheckMatrix(input, "input", limits);
  if (!dtype.ok()) return dtype.status();
  const auto op = FromProto(static_cast<v1::ReduceOp>(reduce_op));
  if (!op) {
    return absl::InvalidArgumentError(absl::StrCat(
        "op: must be REDUCE_OP_SUM, REDUCE_OP_MIN, REDUCE_OP_MAX or REDUCE_OP_MEAN, got ",
        reduce_op));
  }
  const auto axis = FromProto(static_cast<v1::ReduceAxis>(reduce_axis));
  if (!axis) {
    return absl::InvalidArgumentError(absl::StrCat(
        "axis: must be REDUCE_AXIS_ALL, REDUCE_AXIS_PER_ROW or REDUCE_AXIS_PER_COLUMN, got ",
        reduce_axis));
  }
  Problem p;
  p.op = kernels::Op::kReduce;
  p.dtype = *dtype;
  p.m = input.rows;
  p.n = input.cols;
  p.reduce_op = *op;
  p.reduce_axis = *axis;
  if (auto s = ApplyOutputDType(output_dtype, p); !s.ok()) return s;
  if (auto s = CheckOutputSize(p, "output", limits, output_kept); !s.ok()) return s;
  return p;
}

absl::StatusOr<Problem> ValidateMatMul(const v1::MatMulRequest& req, const Limits& limits) {
  return ValidateMatMul(MatrixShape::Of(req.a()), MatrixShape::Of(req.b()), limits,
                        /*output_kept=*/false, req.output_dtype());
}

absl::StatusOr<Problem> ValidateTranspose(const v1::TransposeRequest& req, const Limits& limits) {
  return ValidateTranspose(MatrixShape::Of(req.input()), limits);
}

absl::StatusOr<Problem> ValidateReduce(const v1::ReduceRequest& req, const Limits& limits) {
  return ValidateReduce(MatrixShape::Of(req.input()), req.op(), req.axis(), limits,
                        /*output_kept=*/false, req.output_dtype());
}

absl::StatusOr<Problem> ValidateProfile(const v1::ProfileRequest& req, const Limits& limits) {
  const auto op = FromProto(req.op());
  if (!op) {
    return absl::InvalidArgumentError(
        absl::StrCat("op: must be OP_MATMUL, OP_TRANSPOSE or OP_REDUCE, got ",
                     v1::Op_IsValid(req.op()) ? v1::Op_Name(req.op()) : std::to_string(req.op())));
  }
  if (auto s = CheckDType(req.dtype(), "dtype"); !s.ok()) return s;
  Problem p;
  p.op = *op;
  p.dtype = *FromProto(req.dtype());
  p.m = req.m();
  p.n = req.n();
  p.k = *op == kernels::Op::kMatMul ? req.k() : 1;
  if (auto s = CheckDim(p.m, "m"); !s.ok()) return s;
  if (auto s = CheckDim(p.n, "n"); !s.ok()) return s;
  if (auto s = CheckDim(p.k, "k"); !s.ok()) return s;
  if (*op == kernels::Op::kReduce) {
    const auto rop = FromProto(req.reduce_op());
    if (!rop) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_op: not a ReduceOp, got ", static_cast<int>(req.reduce_op())));
    }
    const auto axis = FromProto(req.reduce_axis());
    if (!axis) {
      return absl::InvalidArgumentError(
          absl::StrCat("reduce_axis: not a ReduceAxis, got ", static_cast<int>(req.reduce_axis())));
    }
    p.reduce_op = *rop;
    p.reduce_axis = *axis;
  }
  for (const auto& [field, value] :
       {std::pair{"warmup", req.warmup()}, std::pair{"repetitions", req.repetitions()}}) {
    if (value < 0 || value > limits.max_profile_repetitions) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": must be in [0, ", limits.max_profile_repetitions, "], got ", value));
    }
  }
  const bool matmul = *op == kernels::Op::kMatMul;
  if (auto s = CheckSize(p.m, matmul ? p.k : p.n, p.dtype, matmul ? "a (m x k)" : "input (m x n)",
                         limits);
      !s.ok()) {
    return s;
  }
  if (matmul) {
    if (auto s = CheckSize(p.k, p.n, p.dtype, "b (k x n)", limits); !s.ok()) return s;
  }
  if (auto s = CheckOutputSize(p, "output", limits); !s.ok()) return s;
  return p;
}

}  // namespace gpucompute::server
