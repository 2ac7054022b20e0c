// The library's types and compute.proto's enums by name and in messages: dtypes,
// matrices, ops, reductions and shapes.
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpucompute/client.h"

namespace gpucompute {

absl::StatusOr<DType> DTypeFromProto(int dtype, absl::string_view field) {
  DType d;
  if (kernels::DTypeFromProtoValue(dtype, &d)) return d;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", dtype, " (expected one of ", kernels::kDTypeNames, ")"));
}

std::string ProtoDTypeText(int dtype) {
  DType d;
  if (kernels::DTypeFromProtoValue(dtype, &d)) return DTypeName(d);
  return absl::StrCat("dtype ", dtype);
}

void MoveToProto(Matrix&& matrix, v1::Matrix* out) {
  out->set_dtype(ToProto(matrix.dtype()));
  out->set_rows(matrix.rows());
  out->set_cols(matrix.cols());
  *out->mutable_data() = matrix.ReleaseBytes();
}

absl::StatusOr<Matrix> MoveFromProto(v1::Matrix* matrix, const std::string& field) {
  absl::StatusOr<DType> dtype = DTypeFromProto(matrix->dtype(), field + ".dtype");
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<Matrix> m =
      Matrix::FromBytes(*dtype, matrix->rows(), matrix->cols(), std::move(*matrix->mutable_data()));
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", m.status().message()));
  return m;
}

namespace {

// Each enum's names as people type them: one table for both directions.
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};
constexpr Named<v1::ReduceOp> kReduceOps[] = {{v1::REDUCE_OP_SUM, "sum"},
                                              {v1::REDUCE_OP_MIN, "min"},
                                              {v1::REDUCE_OP_MAX, "max"},
                                              {v1::REDUCE_OP_MEAN, "mean"}};
constexpr Named<v1::ReduceAxis> kReduceAxes[] = {{v1::REDUCE_AXIS_ALL, "all"},
                                                 {v1::REDUCE_AXIS_PER_ROW, "per_row"},
                                                 {v1::REDUCE_AXIS_PER_COLUMN, "per_column"}};
constexpr Named<v1::Op> kOps[] = {
    {v1::OP_MATMUL, "matmul"}, {v1::OP_TRANSPOSE, "transpose"}, {v1::OP_REDUCE, "reduce"}};

template <typename Enum, size_t N>
const char* NameOf(const Named<Enum> (&table)[N], Enum value, const char* otherwise) {
  for (const Named<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return otherwise;
}

// The entry named `name`, or INVALID_ARGUMENT "expected sum, min, max or
// mean, got 'median'".
template <typename Enum, size_t N>
absl::StatusOr<Enum> ValueOf(const Named<Enum> (&table)[N], absl::string_view name) {
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (table[i].name == name) return table[i].value;
    absl::StrAppend(&expected, i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
  }
  return absl::InvalidArgumentError(absl::StrCat("expected ", expected, ", got '", name, "'"));
}

}  // namespace

const char* ReduceOpName(v1::ReduceOp op) { return NameOf(kReduceOps, op, "unknown"); }
const char* ReduceAxisName(v1::ReduceAxis axis) { return NameOf(kReduceAxes, axis, "unknown"); }
const char* OpName(v1::Op op) { return NameOf(kOps, op, "unspecified"); }

absl::StatusOr<v1::ReduceOp> ParseReduceOp(absl::string_view name) {
  return ValueOf(kReduceOps, name);
}
absl::StatusOr<v1::ReduceAxis> ParseReduceAxis(absl::string_view name) {
  return ValueOf(kReduceAxes, name);
}
absl::StatusOr<v1::Op> ParseOp(absl::string_view name) { return ValueOf(kOps, name); }

const char* ShapeSyntax(v1::Op op) { return op == v1::OP_MATMUL ? "MxKxN" : "MxN"; }

absl::StatusOr<OpShape> ParseShape(v1::Op op, absl::string_view text) {
  const bool matmul = op == v1::OP_MATMUL;
  const char* example = matmul ? "512x256x128" : "4096x4096";
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar("xX"))) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 1) {
      return absl::InvalidArgumentError(absl::StrCat("expected ", ShapeSyntax(op),
                                                     " with positive integers, e.g. ", example,
                                                     ", got '", text, "'"));
    }
    dims.push_back(d);
  }
  const size_t want = matmul ? 3 : 2;
  if (dims.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", want, " dimensions (",
                                                   ShapeSyntax(op), ", e.g. ", example, "), got '",
                                                   text, "'"));
  }
  // MxKxN: the order of a @ b, a M x K and b K x N.
  return matmul ? OpShape{.m = dims[0], .n = dims[2], .k = dims[1]}
                : OpShape{.m = dims[0], .n = dims[1], .k = 0};
}

std::string ShapeText(v1::Op op, const OpShape& shape) {
  if (op == v1::OP_MATMUL) return absl::StrCat(shape.m, "x", shape.k, "x", shape.n);
  return absl::StrCat(shape.m, "x", shape.n);
}

}  // namespace gpucompute
