// The .npy reader (client/src/npy.cc) on arbitrary bytes: it must never
// crash or hit undefined behaviour; an image it accepts must hold exactly
// rows * cols elements after its header, and must read back the same after
// being rewritten with the header numpy.save writes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpucompute/npy.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "\nnpy_fuzz: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucompute;
  const std::string_view contents(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Matrix> m = ParseNpy(contents, "fuzz.npy");
  if (!m.ok()) {
    if (m.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("unexpected status " + m.status().ToString());
    }
    if (m.status().message().find("fuzz.npy") == std::string_view::npos) {
      Fail("an error that does not name the file: " + m.status().ToString());
    }
    return 0;
  }
  if (m->rows() < 0 || m->cols() < 0) Fail("accepted a negative dimension");
  const int64_t want = m->rows() * m->cols() * DTypeSize(m->dtype());
  if (m->byte_size() != want) Fail("the data size does not match rows * cols");
  if (size < size_t(want) || contents.substr(size - size_t(want)) != m->bytes()) {
    Fail("the data is not the bytes after the header");
  }
  // Rewritten as numpy.save would write it, it reads back the same.
  const std::string again = NpyHeader(m->dtype(), m->rows(), m->cols()) + m->bytes();
  absl::StatusOr<Matrix> back = ParseNpy(again, "again.npy");
  if (!back.ok()) Fail("its rewrite does not parse: " + back.status().ToString());
  if (back->dtype() != m->dtype() || back->rows() != m->rows() || back->cols() != m->cols() ||
      back->bytes() != m->bytes()) {
    Fail("its rewrite reads back differently");
  }
  return 0;
}
