// Host-side dense matrices for the gpucompute client: row-major,
// little-endian, of any dtype the server takes (float32, float64, float16,
// bfloat16). The element bytes live in one std::string so they
// can be moved into and out of protobuf `bytes` fields without copying.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpucompute/kernels/dtype.h"
#include "gpucompute/kernels/half.h"

namespace gpucompute {

// The server's dtype table (kernels/include/gpucompute/kernels/dtype.h):
// one enum and one set of names, sizes and wire numbers for both sides.
using DType = kernels::DType;
// 16-bit elements as their bits; kernels::ToFloat widens them exactly and
// kernels::FromFloat<T> rounds a float to nearest even.
using Float16 = kernels::Float16;
using BFloat16 = kernels::BFloat16;

// "float32", "float64", "float16", "bfloat16".
using kernels::DTypeName;
// Accepts each dtype's name and the short forms f32/fp32, f64/fp64/double,
// f16/fp16/half and bf16.
absl::StatusOr<DType> ParseDType(const std::string& name);
inline int64_t DTypeSize(DType dtype) { return kernels::ElementSize(dtype); }

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<Float16> {
  static constexpr DType value = DType::kFloat16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::kBFloat16;
};

// rows * cols * element size, or INVALID_ARGUMENT naming the numbers when a
// dimension is negative or the product overflows int64.
absl::StatusOr<int64_t> MatrixByteSize(DType dtype, int64_t rows, int64_t cols);

class Matrix {
 public:
  // An empty 0 x 0 float32 matrix.
  Matrix() = default;

  // A zero-filled rows x cols matrix.
  static absl::StatusOr<Matrix> Zeros(DType dtype, int64_t rows, int64_t cols);

  // Takes ownership of `bytes` (row-major, little-endian elements) without
  // copying; fails when its length is not rows * cols * element size.
  static absl::StatusOr<Matrix> FromBytes(DType dtype, int64_t rows, int64_t cols,
                                          std::string bytes);

  // Copies `values` (row-major, rows * cols of them).
  template <typename T>
  static absl::StatusOr<Matrix> FromValues(int64_t rows, int64_t cols, std::span<const T> values);

  // Values uniform in [-1, 1), reproducible for a given seed (the range the
  // server's numerical contract is stated for).
  static absl::StatusOr<Matrix> Random(DType dtype, int64_t rows, int64_t cols, uint64_t seed);

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t elements() const { return rows_ * cols_; }
  int64_t byte_size() const { return static_cast<int64_t>(bytes_.size()); }

  // The raw element bytes.
  const std::string& bytes() const { return bytes_; }
  char* mutable_byte_data() { return bytes_.data(); }
  // Hands the element bytes to the caller and leaves a 0 x 0 matrix behind.
  std::string ReleaseBytes();

  // Typed views. T must match dtype(); a mismatch is a programming error and
  // aborts with a message (check dtype() first when it is not known).
  template <typename T>
  std::span<const T> values() const;
  template <typename T>
  std::span<T> mutable_values();

  // Element (r, c) as double, whatever the dtype.
  double at(int64_t r, int64_t c) const;

  // "512x256 float32".
  std::string ShapeString() const;

 private:
  Matrix(DType dtype, int64_t rows, int64_t cols, std::string bytes)
      : dtype_(dtype), rows_(rows), cols_(cols), bytes_(std::move(bytes)) {}
  [[noreturn]] static void DTypeMismatch(DType have, DType want);

  DType dtype_ = DType::kFloat32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::string bytes_;
};

template <typename T>
absl::StatusOr<Matrix> Matrix::FromValues(int64_t rows, int64_t cols, std::span<const T> values) {
  absl::StatusOr<int64_t> bytes = MatrixByteSize(DTypeOf<T>::value, rows, cols);
  if (!bytes.ok()) return bytes.status();
  if (static_cast<int64_t>(values.size_bytes()) != *bytes) {
    return absl::InvalidArgumentError("Matrix::FromValues: " + std::to_string(values.size()) +
                                      " values given for a " + std::to_string(rows) + "x" +
                                      std::to_string(cols) + " matrix (" +
                                      std::to_string(rows * cols) + " expected)");
  }
  return Matrix(DTypeOf<T>::value, rows, cols,
                std::string(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
}

template <typename T>
std::span<const T> Matrix::values() const {
  if (dtype_ != DTypeOf<T>::value) DTypeMismatch(dtype_, DTypeOf<T>::value);
  return {reinterpret_cast<const T*>(bytes_.data()), static_cast<size_t>(elements())};
}

template <typename T>
std::span<T> Matrix::mutable_values() {
  if (dtype_ != DTypeOf<T>::value) DTypeMismatch(dtype_, DTypeOf<T>::value);
  return {reinterpret_cast<T*>(bytes_.data()), static_cast<size_t>(elements())};
}

}  // namespace gpucompute
