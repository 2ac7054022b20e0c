// Requests that name shared-memory slices, and the random bytes tests put
// in regions.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "gpucompute/v1/compute.pb.h"
#include "support/test_util.h"

namespace gpucompute::testing {

namespace v1 = ::gpucompute::v1;

inline v1::Matrix SliceMatrix(v1::DType dtype, int64_t rows, int64_t cols,
                              const std::string& region, int64_t offset, int64_t bytes) {
  v1::Matrix m;
  m.set_dtype(dtype);
  m.set_rows(rows);
  m.set_cols(cols);
  v1::SharedMemorySlice* s = m.mutable_shared_memory();
  s->set_region(region);
  s->set_offset(offset);
  s->set_byte_size(bytes);
  return m;
}

inline void SetSlice(v1::SharedMemorySlice* s, const std::string& region, int64_t offset,
                     int64_t bytes) {
  s->set_region(region);
  s->set_offset(offset);
  s->set_byte_size(bytes);
}

inline int64_t ElementSize(v1::DType dtype) { return dtype == v1::DTYPE_FLOAT32 ? 4 : 8; }

// Random values of `dtype` written at `at`.
inline void FillRandom(char* at, v1::DType dtype, int64_t count, std::mt19937_64& rng) {
  if (dtype == v1::DTYPE_FLOAT32) {
    auto v = RandomValues<float>(count, rng);
    std::memcpy(at, v.data(), v.size() * 4);
  } else {
    auto v = RandomValues<double>(count, rng);
    std::memcpy(at, v.data(), v.size() * 8);
  }
}

// `rows` x `cols` at `at`, as an inline Matrix (to compare with MaxError).
inline v1::Matrix Inline(v1::DType dtype, int64_t rows, int64_t cols, const char* at) {
  v1::Matrix m;
  m.set_dtype(dtype);
  m.set_rows(rows);
  m.set_cols(cols);
  m.set_data(std::string(at, size_t(rows * cols * ElementSize(dtype))));
  return m;
}

}  // namespace gpucompute::testing
