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
#include "absl/strings/str_join.h"

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

// A value of the Python literal dict numpy writes as the header.
struct HeaderValue {
  enum Kind { kString, kBool, kInt, kTuple, kOther } kind = kOther;
  std::string text;  // kString: the contents; kOther: the raw source
  bool boolean = false;
  std::vector<int64_t> tuple;
};

// A recursive-descent parser for the subset of Python literals that .npy
// headers use: {'key': value, ...} with strings, True/False, ints, tuples.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  absl::Status Parse(std::vector<std::pair<std::string, HeaderValue>>* out) {
    SkipSpace();
    if (!Eat('{')) {
      return Error(absl::StrCat("header is not a dict (starts with '",
                                std::string(s_.substr(pos_, 20)), "')"));
    }
    while (true) {
      SkipSpace();
      if (Eat('}')) break;
      std::string key;
      if (absl::Status st = ParseString(&key); !st.ok()) return st;
      SkipSpace();
      if (!Eat(':')) return Error(absl::StrCat("expected ':' after key '", key, "'"));
      HeaderValue value;
      if (absl::Status st = ParseValue(&value); !st.ok()) return st;
      out->emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (Eat('}')) break;
      if (!Eat(',')) return Error("expected ',' or '}' in the header dict");
    }
    SkipSpace();
    if (pos_ != s_.size()) {
      return Error(absl::StrCat("unexpected text after the header dict: '",
                                std::string(s_.substr(pos_, 20)), "'"));
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": malformed .npy header: ", what));
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  absl::Status ParseString(std::string* out) {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
      return Error(absl::StrCat("expected a quoted key at offset ", pos_));
    }
    const char quote = s_[pos_++];
    size_t end = s_.find(quote, pos_);
    if (end == std::string_view::npos) return Error("unterminated string");
    *out = std::string(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return absl::OkStatus();
  }
  bool ParseInt(int64_t* out) {
    size_t start = pos_;
    bool negative = Eat('-');
    if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      pos_ = start;
      return false;
    }
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      int digit = s_[pos_++] - '0';
      if (v > (INT64_MAX - digit) / 10) return false;
      v = v * 10 + digit;
    }
    Eat('L');  // Python 2 long literals, written by old numpy
    *out = negative ? -v : v;
    return true;
  }
  absl::Status ParseValue(HeaderValue* out) {
    SkipSpace();
    if (pos_ >= s_.size()) return Error("header ends where a value was expected");
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      out->kind = HeaderValue::kString;
      return ParseString(&out->text);
    }
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      out->kind = HeaderValue::kBool;
      out->boolean = true;
      return absl::OkStatus();
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      out->kind = HeaderValue::kBool;
      return absl::OkStatus();
    }
    if (c == '(') {
      ++pos_;
      out->kind = HeaderValue::kTuple;
      while (true) {
        SkipSpace();
        if (Eat(')')) break;
        int64_t v;
        if (!ParseInt(&v)) return Error("shape tuple holds something other than integers");
        out->tuple.push_back(v);
        SkipSpace();
        if (Eat(')')) break;
        if (!Eat(',')) return Error("shape tuple holds something other than integers");
      }
      return absl::OkStatus();
    }
    int64_t v;
    if (ParseInt(&v)) {
      out->kind = HeaderValue::kInt;
      out->text = std::to_string(v);
      return absl::OkStatus();
    }
    // Anything else (lists for structured dtypes, dicts, ...) is kept as raw
    // text up to the next top-level ',' or '}' so the error can show it.
    size_t start = pos_;
    int depth = 0;
    while (pos_ < s_.size()) {
      char ch = s_[pos_];
      if (ch == '[' || ch == '(' || ch == '{') ++depth;
      if (ch == ']' || ch == ')' || ch == '}') {
        if (depth == 0) break;
        --depth;
      }
      if (ch == ',' && depth == 0) break;
      ++pos_;
    }
    out->kind = HeaderValue::kOther;
    out->text = std::string(s_.substr(start, pos_ - start));
    return absl::OkStatus();
  }

  std::string_view s_;
  size_t pos_ = 0;
  const std::string& name_;
};

std::string ShapeText(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

struct Layout {
  DType dtype;
  int64_t rows;
  int64_t cols;
  std::string shape_text;
};

absl::StatusOr<Layout> InterpretHeader(std::string_view text, const std::string& name) {
  std::vector<std::pair<std::string, HeaderValue>> items;
  HeaderParser parser(text, name);
  if (absl::Status st = parser.Parse(&items); !st.ok()) return st;

  const HeaderValue* descr = nullptr;
  const HeaderValue* fortran = nullptr;
  const HeaderValue* shape = nullptr;
  for (const auto& [key, value] : items) {
    const HeaderValue** slot = key == "descr"           ? &descr
                               : key == "fortran_order" ? &fortran
                               : key == "shape"         ? &shape
                                                        : nullptr;
    if (slot == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": .npy header has an unexpected key '", key,
                       "' (expected exactly 'descr', 'fortran_order', 'shape')"));
    }
    if (*slot != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": .npy header repeats the key '", key, "'"));
    }
    *slot = &value;
  }
  for (auto [key, value] : {std::pair{"descr", descr}, std::pair{"fortran_order", fortran},
                            std::pair{"shape", shape}}) {
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": .npy header lacks the key '", key, "'"));
    }
  }

  Layout layout;
  if (descr->kind != HeaderValue::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": unsupported dtype ", descr->text,
                     " (structured dtypes are not supported; expected '<f4' or '<f8')"));
  }
  if (descr->text == "<f4") {
    layout.dtype = DType::kFloat32;
  } else if (descr->text == "<f8") {
    layout.dtype = DType::kFloat64;
  } else if (descr->text == ">f4" || descr->text == ">f8") {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": unsupported dtype '", descr->text,
        "' (big-endian); save it little-endian, e.g. a.astype('<", descr->text.substr(1), "')"));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, ": unsupported dtype '", descr->text,
                                                   "' (expected '<f4' float32 or '<f8' float64)"));
  }
  if (fortran->kind != HeaderValue::kBool) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": .npy header 'fortran_order' is not True or False"));
  }
  if (fortran->boolean) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": array is stored in Fortran (column-major) order; save a C-ordered array, "
                     "e.g. numpy.save(path, numpy.ascontiguousarray(a))"));
  }
  if (shape->kind != HeaderValue::kTuple) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": .npy header 'shape' is not a tuple of integers"));
  }
  layout.shape_text = ShapeText(shape->tuple);
  if (shape->tuple.empty() || shape->tuple.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": shape ", layout.shape_text, " has ", shape->tuple.size(),
                     " dimensions; only 1-D (read as 1 x N) and 2-D arrays are supported"));
  }
  for (int64_t d : shape->tuple) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": shape ", layout.shape_text, " has a negative dimension"));
    }
  }
  layout.rows = shape->tuple.size() == 1 ? 1 : shape->tuple[0];
  layout.cols = shape->tuple.back();
  return layout;
}

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

  absl::StatusOr<Layout> layout = InterpretHeader(header, name);
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
      absl::StrCat("{'descr': '", dtype == DType::kFloat32 ? "<f4" : "<f8",
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
