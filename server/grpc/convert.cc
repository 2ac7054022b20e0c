#include "server/grpc/convert.h"

namespace gpucompute::server {

// Through the dtype table's wire numbers (tests/unit/dtype_table_test.cc
// checks them against compute.proto).
std::optional<kernels::DType> FromProto(v1::DType dtype) {
  kernels::DType d;
  if (!kernels::DTypeFromProtoValue(int(dtype), &d)) return std::nullopt;
  return d;
}

std::optional<kernels::ReduceOp> FromProto(v1::ReduceOp op) {
  switch (op) {
    case v1::REDUCE_OP_SUM: return kernels::ReduceOp::kSum;
    case v1::REDUCE_OP_MIN: return kernels::ReduceOp::kMin;
    case v1::REDUCE_OP_MAX: return kernels::ReduceOp::kMax;
    case v1::REDUCE_OP_MEAN: return kernels::ReduceOp::kMean;
    default: return std::nullopt;
  }
}

std::optional<kernels::ReduceAxis> FromProto(v1::ReduceAxis axis) {
  switch (axis) {
    case v1::REDUCE_AXIS_ALL: return kernels::ReduceAxis::kAll;
    case v1::REDUCE_AXIS_PER_ROW: return kernels::ReduceAxis::kPerRow;
    case v1::REDUCE_AXIS_PER_COLUMN: return kernels::ReduceAxis::kPerColumn;
    default: return std::nullopt;
  }
}

std::optional<kernels::Op> FromProto(v1::Op op) {
  switch (op) {
    case v1::OP_MATMUL: return kernels::Op::kMatMul;
    case v1::OP_TRANSPOSE: return kernels::Op::kTranspose;
    case v1::OP_REDUCE: return kernels::Op::kReduce;
    default: return std::nullopt;
  }
}

v1::DType ToProto(kernels::DType dtype) {
  return static_cast<v1::DType>(kernels::Describe(dtype).proto_value);
}

v1::Op ToProto(kernels::Op op) {
  switch (op) {
    case kernels::Op::kMatMul: return v1::OP_MATMUL;
    case kernels::Op::kTranspose: return v1::OP_TRANSPOSE;
    case kernels::Op::kReduce: return v1::OP_REDUCE;
  }
  return v1::OP_UNSPECIFIED;
}

std::string ProtoDTypeNames() {
  std::string names;
  for (kernels::DType d : kernels::kAllDTypes) {
    if (!names.empty()) names += ", ";
    names += v1::DType_Name(ToProto(d));
  }
  return names;
}

std::string ProtoDTypeName(int dtype) {
  if (v1::DType_IsValid(dtype)) return v1::DType_Name(static_cast<v1::DType>(dtype));
  return std::to_string(dtype);
}

}  // namespace gpucompute::server
