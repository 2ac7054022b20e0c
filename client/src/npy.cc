#include "gpucompute/npy.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "npy_header.h"

namespace gpucompute {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// numpy.save pads the header so the data starts on this boundary.
constexpr size_t kArrayAlign = 64;
// numpy.save leaves room for the first dimension to grow to this many digits
// so the header can be rewritten in place (numpy >= 1.23 does this).
constexpr size_t kGrowthAxisMaxDigits = 21;

// Where .npy bytes come from: a file or memory.
class Source {
 public:
  virtual ~Source() = default;
  // Reads exactly n bytes or reports how many were there.
  virtual absl::Status Read(char* dst, size_t n, const char* what) = 0;
  // Bytes left after the current position.
  virtual int64_t Remaining() const = 0;
};

class MemorySource : public Source {
 public:
  MemorySource(std::string_view data, const std::string& name) : data_(data), name_(name) {}
  absl::Status Read(char* dst, size_t n, const char* what) override {
    if (data_.size() < n) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": truncated ", what, ": needs ", n,
                                                     " bytes, only ", data_.size(), " left"));
    }
    std::memcpy(dst, data_.data(), n);
    data_.remove_prefix(n);
    return absl::OkStatus();
  }
  int64_t Remaining() const override { return static_cast<int64_t>(data_.size()); }

 private:
  std::string_view data_;
  const std::string& name_;
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

class FileSource : public Source {
 public:
  FileSource(std::FILE* f, int64_t size, const std::string& name)
      : f_(f), remaining_(size), name_(name) {}
  absl::Status Read(char* dst, size_t n, const char* what) override {
    if (remaining_ < static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": truncated ", what, ": needs ", n,
                                                     " bytes, only ", remaining_, " left"));
    }
    size_t got = std::fread(dst, 1, n, f_);
    if (got != n) {
      return absl::DataLossError(absl::StrCat(name_, ": read error after ", got, " of ", n,
                                              " bytes of ", what, ": ", std::strerror(errno)));
    }
    remaining_ -= static_cast<int64_t>(n);
    return absl::OkStatus();
  }
  int64_t Remaining() const override { return remaining_; }

 private:
  std::FILE* f_;
  int64_t remaining_;
  const std::string& name_;
};

uint32_t LittleEndian(const unsigned char* p, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

absl::StatusOr<Matrix> ReadFrom(Source& src, const std::string& name) {
  // Read what there is of magic + version first so that a short non-.npy file
  // is reported as "bad magic" rather than "truncated".
  unsigned char preamble[8];
  const size_t magic_part = static_cast<size_t>(std::min<int64_t>(src.Remaining(), 8));
  if (absl::Status st = src.Read(reinterpret_cast<char*>(preamble), magic_part, "magic");
      !st.ok()) {
    return st;
  }
  if (magic_part < kMagicLen || std::memcmp(preamble, kMagic, kMagicLen) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a .npy file (bad magic; expected \\x93NUMPY)"));
  }
  if (magic_part < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": truncated .npy file: it ends inside the version bytes"));
  }
  const int major = preamble[6];
  const int minor = preamble[7];
  if ((major != 1 && major != 2) || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unsupported .npy format version ",
                                                   major, ".", minor, " (supported: 1.0, 2.0)"));
  }
  const int len_bytes = major == 1 ? 2 : 4;
  unsigned char len_field[4];
  if (absl::Status st = src.Read(reinterpret_cast<char*>(len_field), len_bytes, "header length");
      !st.ok()) {
    return st;
  }
  const uint32_t header_len = LittleEndian(len_field, len_bytes);
  if (src.Remaining() < static_cast<int64_t>(header_len)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": truncated .npy header: it declares ",
                                                   header_len, " bytes but only ", src.Remaining(),
                                                   " follow"));
  }
  std::string header(header_len, '\0');
  if (absl::Status st = src.Read(header.data(), header_len, "header"); !st.ok()) return st;

  absl::StatusOr<NpyLayout> layout = InterpretNpyHeader(header, name);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<int64_t> data_bytes = MatrixByteSize(layout->dtype, layout->rows, layout->cols);
  if (!data_bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": shape ", layout->shape_text, ": ", data_bytes.status().message()));
  }
  const int64_t have = src.Remaining();
  if (have != *data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": data is ", have, " bytes but shape ", layout->shape_text, " ",
        DTypeName(layout->dtype), " needs ", *data_bytes,
        have < *data_bytes ? " (file truncated)" : " (trailing bytes after the array)"));
  }
  absl::StatusOr<Matrix> m = Matrix::Zeros(layout->dtype, layout->rows, layout->cols);
  if (!m.ok()) return m;
  if (absl::Status st = src.Read(m->mutable_byte_data(), static_cast<size_t>(*data_bytes), "data");
      !st.ok()) {
    return st;
  }
  return m;
}

}  // namespace

std::string NpyHeader(DType dtype, int64_t rows, int64_t cols) {
  std::string dict =
      absl::StrCat("{'descr': '", kernels::Describe(dtype).npy_descr,
                   "', 'fortran_order': False, 'shape': (", rows, ", ", cols, "), }");
  const size_t first_dim_digits = std::to_string(rows).size();
  if (first_dim_digits < kGrowthAxisMaxDigits) {
    dict.append(kGrowthAxisMaxDigits - first_dim_digits, ' ');
  }
  // Same arithmetic as numpy: a full alignment block of padding when the
  // header is already aligned.
  const size_t unpadded = kMagicLen + 2 + 2 + dict.size() + 1;
  const size_t pad = kArrayAlign - unpadded % kArrayAlign;
  const size_t header_len = dict.size() + pad + 1;
  std::string out(kMagic, kMagicLen);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header_len & 0xff));
  out.push_back(static_cast<char>(header_len >> 8));
  out += dict;
  out.append(pad, ' ');
  out.push_back('\n');
  return out;
}

absl::StatusOr<Matrix> ParseNpy(std::string_view contents, const std::string& name) {
  MemorySource src(contents, name);
  return ReadFrom(src, name);
}

absl::StatusOr<Matrix> ReadNpy(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  if (std::fseek(f.get(), 0, SEEK_END) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot seek in ", path, " (not a regular file?): ", std::strerror(errno)));
  }
  const long size = std::ftell(f.get());
  if (size < 0 || std::fseek(f.get(), 0, SEEK_SET) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot determine the size of ", path, ": ", std::strerror(errno)));
  }
  FileSource src(f.get(), size, path);
  return ReadFrom(src, path);
}

absl::Status WriteNpy(const std::string& path, const Matrix& matrix) {
  const std::string header = NpyHeader(matrix.dtype(), matrix.rows(), matrix.cols());
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const std::string& data = matrix.bytes();
  if (std::fwrite(header.data(), 1, header.size(), f.get()) != header.size() ||
      std::fwrite(data.data(), 1, data.size(), f.get()) != data.size()) {
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  std::FILE* raw = f.release();
  if (std::fclose(raw) != 0) {
    return absl::DataLossError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace gpucompute
