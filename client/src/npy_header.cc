#include "npy_header.h"

#include <cctype>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpucompute {
namespace {

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

// "'<f4' float32, '<f8' float64, ...": what a header may name.
std::string NpyDescrs() {
  std::string out;
  for (DType d : kernels::kAllDTypes) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", "'", kernels::Describe(d).npy_descr, "' ",
                    kernels::DTypeName(d));
  }
  return out;
}

}  // namespace

absl::StatusOr<NpyLayout> InterpretNpyHeader(std::string_view text, const std::string& name) {
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

  NpyLayout layout;
  if (descr->kind != HeaderValue::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": unsupported dtype ", descr->text,
                     " (structured dtypes are not supported; expected ", NpyDescrs(), ")"));
  }
  // The table's descriptors; a 2-byte void is BF16 whichever byte-order
  // mark NumPy gave it (np.save of an ml_dtypes.bfloat16 array).
  bool known = false;
  for (DType d : kernels::kAllDTypes) {
    if (descr->text == kernels::Describe(d).npy_descr) {
      layout.dtype = d;
      known = true;
    }
  }
  if (descr->text == "|V2") {
    layout.dtype = DType::kBFloat16;
    known = true;
  }
  if (!known) {
    if (descr->text.size() == 3 && descr->text[0] == '>' && descr->text[1] == 'f') {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": unsupported dtype '", descr->text,
          "' (big-endian); save it little-endian, e.g. a.astype('<", descr->text.substr(1), "')"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": unsupported dtype '", descr->text, "' (expected ", NpyDescrs(), ")"));
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

}  // namespace gpucompute
