// Conversions between the wire enums of compute.proto and the kernel
// library's types. The only place both vocabularies meet.
#pragma once

#include <optional>
#include <string>

#include "gpucompute/kernels/problem.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute::server {

namespace v1 = ::gpucompute::v1;

std::optional<kernels::DType> FromProto(v1::DType dtype);
std::optional<kernels::ReduceOp> FromProto(v1::ReduceOp op);
std::optional<kernels::ReduceAxis> FromProto(v1::ReduceAxis axis);
std::optional<kernels::Op> FromProto(v1::Op op);

v1::DType ToProto(kernels::DType dtype);
v1::Op ToProto(kernels::Op op);

// "DTYPE_FLOAT32", or the number when the value has no name.
// Every dtype the server takes, as compute.proto names them, comma separated.
std::string ProtoDTypeNames();
std::string ProtoDTypeName(int dtype);

}  // namespace gpucompute::server
