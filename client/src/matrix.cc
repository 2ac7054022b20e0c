#include "gpucompute/matrix.h"

#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <stdexcept>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace gpucompute {

// The wire format and .npy files are little-endian; the typed views hand out
// the bytes as they are.
static_assert(std::endian::native == std::endian::little,
              "gpucompute's client assumes a little-endian host");

absl::StatusOr<DType> ParseDType(const std::string& name) {
  DType dtype;
  if (kernels::DTypeFromName(name, &dtype)) return dtype;
  if (name == "f32" || name == "fp32") return DType::kFloat32;
  if (name == "f64" || name == "fp64" || name == "double") return DType::kFloat64;
  if (name == "f16" || name == "fp16" || name == "half") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (expected one of ", kernels::kDTypeNames, ")"));
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
  const auto too_large = [&](absl::string_view why) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", *bytes, " bytes for a ",
                                                     rows, "x", cols, " ", DTypeName(dtype),
                                                     " matrix: ", why));
  };
  // Past the host's memory an allocation is never worth trying: where the
  // kernel overcommits it may succeed, and the zero fill end in the OOM killer.
  const int64_t host_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE));
  if (host_bytes > 0 && *bytes > host_bytes) {
    return too_large(absl::StrCat("more than this host's ", host_bytes, " bytes of memory"));
  }
  try {
    return Matrix(dtype, rows, cols, std::string(static_cast<size_t>(*bytes), '\0'));
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  return too_large("the allocation failed");
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
// 32- and 64-bit values are drawn in their own type; 16-bit ones are float
// draws rounded to nearest.
template <typename T>
void FillUniform(std::span<T> out, uint64_t seed) {
  std::mt19937_64 rng(seed);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<T> dist(T(-1), T(1));
    for (T& v : out) v = dist(rng);
  } else {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (T& v : out) v = kernels::FromFloat<T>(dist(rng));
  }
}

template <typename T>
double Widened(const Matrix& m, int64_t i) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<double>(m.values<T>()[i]);
  } else {
    return kernels::ToFloat(m.values<T>()[i]);
  }
}
}  // namespace

absl::StatusOr<Matrix> Matrix::Random(DType dtype, int64_t rows, int64_t cols, uint64_t seed) {
  absl::StatusOr<Matrix> m = Zeros(dtype, rows, cols);
  if (!m.ok()) return m;
  switch (dtype) {
    case DType::kFloat32: FillUniform(m->mutable_values<float>(), seed); break;
    case DType::kFloat64: FillUniform(m->mutable_values<double>(), seed); break;
    case DType::kFloat16: FillUniform(m->mutable_values<Float16>(), seed); break;
    case DType::kBFloat16: FillUniform(m->mutable_values<BFloat16>(), seed); break;
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
  switch (dtype_) {
    case DType::kFloat32: return Widened<float>(*this, i);
    case DType::kFloat64: return Widened<double>(*this, i);
    case DType::kFloat16: return Widened<Float16>(*this, i);
    case DType::kBFloat16: return Widened<BFloat16>(*this, i);
  }
  return 0;  // not reached: every case returns
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
