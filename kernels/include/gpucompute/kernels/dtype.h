// The element types, as one table: the server, the kernels, the C++ client,
// the CLI, the load test and the bench read a dtype's name, wire number,
// size, .npy descriptor, accumulator and tolerances here. Every switch over
// DType is written without `default:` (the build has -Wall -Werror, so a
// forgotten case fails to compile); tests/unit/dtype_table_test.cc checks the
// table against the proto, NumPy's names and the Python client.
//
// Header only and C++17, with no dependencies: nvcc compiles it into kernel
// files, and the client library includes it without linking the kernels.
#pragma once

#include <cstdint>
#include <string_view>

namespace gpucompute::kernels {

enum class DType { kFloat32, kFloat64, kFloat16, kBFloat16 };

// Every dtype, in the order of their wire numbers.
inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                       DType::kBFloat16};

struct DTypeInfo {
  DType dtype;
  const char* name;       // "float32": GetServerInfo, messages, the CLI's --dtype
  int proto_value;        // gpucompute.v1.DType's number
  int64_t size;           // bytes per element
  const char* npy_descr;  // the .npy header's descr ("<V2": NumPy has no bfloat16)
  // What MatMul and Reduce accumulate in: 16-bit inputs in float32, rounded
  // once to the output dtype.
  DType accumulator;
  // Allowed error of a MatMul result held in this dtype, relative to
  // max(1, max|reference|), against a float64 reference.
  double matmul_tolerance;
  // Allowed error of a SUM or MEAN result held in this dtype, relative to
  // sum|x| (mean|x|) over the range it reduces ...
  double reduce_tolerance;
  // ... plus this fraction of |reference|: the final rounding to the dtype.
  double reduce_rounding;
  // Largest finite value (anything that rounds beyond it is +-inf).
  double max_finite;
};

inline constexpr DTypeInfo Describe(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return {DType::kFloat32, "float32", 1,    4, "<f4",
              DType::kFloat32, 1e-4,      1e-5, 0, 3.4028234663852886e38};
    case DType::kFloat64:
      return {DType::kFloat64, "float64", 2,     8, "<f8",
              DType::kFloat64, 1e-12,     1e-12, 0, 1.7976931348623157e308};
    case DType::kFloat16:
      return {DType::kFloat16, "float16",  3,    2,          "<f2",
              DType::kFloat32, 1.0 / 1024, 1e-5, 1.0 / 2048, 65504.0};
    case DType::kBFloat16:
      return {DType::kBFloat16, "bfloat16", 4,    2,         "<V2",
              DType::kFloat32,  1.0 / 128,  1e-5, 1.0 / 256, 3.3895313892515355e38};
  }
  return {};  // not reached: every case returns
}

inline constexpr const char* DTypeName(DType dtype) { return Describe(dtype).name; }
inline constexpr int64_t ElementSize(DType dtype) { return Describe(dtype).size; }
inline constexpr bool IsHalfPrecision(DType dtype) { return Describe(dtype).size == 2; }

// The dtype with this wire number, or false when there is none.
inline constexpr bool DTypeFromProtoValue(int value, DType* dtype) {
  for (DType d : kAllDTypes) {
    if (Describe(d).proto_value == value) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

// The dtype named `name` ("float16"), or false.
inline constexpr bool DTypeFromName(std::string_view name, DType* dtype) {
  for (DType d : kAllDTypes) {
    if (name == Describe(d).name) {
      *dtype = d;
      return true;
    }
  }
  return false;
}

// Every dtype's names spelled once, in the order of their wire numbers:
// "float32, float64, float16, bfloat16" (for messages).
inline constexpr const char* kDTypeNames = "float32, float64, float16, bfloat16";

}  // namespace gpucompute::kernels
