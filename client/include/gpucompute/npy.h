// NumPy .npy files (format versions 1.0 and 2.0) holding float32 ('<f4') or
// float64 ('<f8') arrays in C order, 1-D (read as 1 x N) or 2-D.
// Spec: numpy.lib.format. Everything else is rejected with an error that
// names the file and what was found.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpucompute/matrix.h"

namespace gpucompute {

// Reads `path`. The element bytes are read straight into the matrix.
absl::StatusOr<Matrix> ReadNpy(const std::string& path);

// Parses a whole .npy image held in memory; `name` only labels errors.
absl::StatusOr<Matrix> ParseNpy(std::string_view contents, const std::string& name = "<npy>");

// Writes `matrix` as a 2-D array, byte-for-byte as numpy.save would.
absl::Status WriteNpy(const std::string& path, const Matrix& matrix);

// The magic, version, header length and header dict numpy.save writes for
// a C-ordered rows x cols array of `dtype` (a multiple of 64 bytes).
std::string NpyHeader(DType dtype, int64_t rows, int64_t cols);

}  // namespace gpucompute
