// The header of a .npy file: the Python dict literal numpy writes
// ({'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }), parsed as
// the subset of Python it uses and checked as the layout of a matrix. Every
// error names the file and what was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "gpucompute/matrix.h"

namespace gpucompute {

struct NpyLayout {
  DType dtype;
  int64_t rows;
  int64_t cols;
  std::string shape_text;  // as numpy prints it, e.g. "(3, 4)" or "(5,)"
};

// `text` is the header's dict; `name` (a path, or "input") prefixes errors.
absl::StatusOr<NpyLayout> InterpretNpyHeader(std::string_view text, const std::string& name);

}  // namespace gpucompute
