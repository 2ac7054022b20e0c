#include "gpucompute/matrix.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"

namespace gpucompute {

// The wire format and .npy files are little-endian; the typed views hand out
// the bytes as they are.
static_assert(std::endian::native == std::endian::little,
              "gpucompute's client assumes a little-endian host");

const char* DTypeName(DType dtype) { return dtype == DType::kFloat32 ? "float32" : "float64"; }

absl::StatusOr<DType> ParseDType(const std::string& name) {
  if (name == "float32" || name == "f32" || name == "fp32") return DType::kFloat32;
  if (name == "float64" || name == "f64" || name == "fp64" || name == "double") {
    return DType::kFloat64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected float32 or float64)"));
}

absl::StatusOr<int64_t> MatrixByteSize(DType dtype, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrix shape ", rows, "x", cols, " has a negative dimension"));
  }
  const int64_t elem = DTypeSize(dtype);
  if (cols != 0 && rows > std::numeric_limits<int64_t>::max() / elem / cols) {
    return absl::InvalidArgumentError(absl::StrCat("matrix shape ", rows, "x", cols, " ",
                                                   DTypeName(dtype),
                                                   " is too large: byte size overflows int64"));
  }
  return rows * cols * elem;
}

absl::StatusOr<Matrix> Matrix::Zeros(DType dtype, int64_t rows, int64_t cols) {
  absl::StatusOr<int64_t> bytes = MatrixByteSize(dtype, rows, cols);
  if (!bytes.ok()) return bytes.status();
  return Matrix(dtype, rows, cols, std::string(static_cast<size_t>(*bytes), '\0'));
}

absl::StatusOr<Matrix> Matrix::FromBytes(DType dtype, int64_t rows, int64_t cols,
                                         std::string bytes) {
  absl::StatusOr<int64_t> want = MatrixByteSize(dtype, rows, cols);
  if (!want.ok()) return want.status();
  if (static_cast<int64_t>(bytes.size()) != *want) {
    return absl::InvalidArgumentError(absl::StrCat("matrix data is ", bytes.size(), " bytes but a ",
                                                   rows, "x", cols, " ", DTypeName(dtype),
                                                   " matrix needs ", *want));
  }
  return Matrix(dtype, rows, cols, std::move(bytes));
}

namespace {
template <typename T>
void FillUniform(std::span<T> out, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  for (T& v : out) v = dist(rng);
}
}  // namespace

absl::StatusOr<Matrix> Matrix::Random(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  absl::StatusOr<Matrix> m = Zeros(dtype, rows, cols);
  if (!m.ok()) return m;
  if (dtype == DType::kFloat32) {
    FillUniform(m->mutable_values<float>(), seed);
  } else {
    FillUniform(m->mutable_values<double>(), seed);
  }
  return m;
}

std::string Matrix::ReleaseBytes() {
  std::string out = std::move(bytes_);
  bytes_.clear();
  rows_ = 0;
  cols_ = 0;
  return out;
}

double Matrix::at(int64_t r, int64_t c) const {
  const int64_t i = r * cols_ + c;
  return dtype_ == DType::kFloat32 ? static_cast<double>(values<float>()[i]) : values<double>()[i];
}

std::string Matrix::ShapeString() const {
  return absl::StrCat(rows_, "x", cols_, " ", DTypeName(dtype_));
}

void Matrix::DTypeMismatch(DType have, DType want) {
  std::fprintf(stderr, "gpucompute::Matrix: typed view as %s of a %s matrix\n", DTypeName(want),
               DTypeName(have));
  std::abort();
}

}  // namespace gpucompute
