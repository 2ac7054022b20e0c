// Request validation: pure functions (no I/O, no CUDA) that turn a request
// into a kernels::Problem or a status whose message names the field and the
// numbers, as docs/contract.md requires.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "gpucompute/kernels/registry.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute::server {

struct Limits {
  int64_t max_matrix_bytes = int64_t{1} << 30;
  int32_t max_profile_repetitions = 1000;
};

// Most elements of one matrix an op takes when it is a tensor (operand or
// kept result): tensors are not bound by max_matrix_bytes (which limits what
// one message carries), and the kernels are verified up to this size.
inline constexpr int64_t kMaxOpElements = (int64_t{1} << 31) - 1;

// What validation reads of a Matrix; its payload may live outside a proto
// (the service reads it straight from the received gRPC slices).
struct MatrixShape {
  int dtype = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t data_bytes = 0;
  // A tensor held by the server: bound by kMaxOpElements, not max_matrix_bytes.
  bool resident = false;
  static MatrixShape Of(const v1::Matrix& m);
};

// `output_kept`: the result stays on the server as a tensor, so
// kMaxOpElements bounds it instead of max_matrix_bytes. `output_dtype`: the
// request's (a proto DType; 0 = the inputs').
absl::StatusOr<kernels::Problem> ValidateMatMul(const MatrixShape& a, const MatrixShape& b,
                                                const Limits& limits, bool output_kept = false,
                                                int output_dtype = 0);
absl::StatusOr<kernels::Problem> ValidateTranspose(const MatrixShape& input, const Limits& limits,
                                                   bool output_kept = false);
absl::StatusOr<kernels::Problem> ValidateReduce(const MatrixShape& input, int reduce_op,
                                                int reduce_axis, const Limits& limits,
                                                bool output_kept = false, int output_dtype = 0);

// rows * cols * element size of `dtype` (a proto DType), or -1 when that
// overflows int64 or the dtype is unknown.
int64_t MatrixBytes(int64_t rows, int64_t cols, int dtype);

// The same on whole request messages.
absl::StatusOr<kernels::Problem> ValidateMatMul(const v1::MatMulRequest& req, const Limits& limits);
absl::StatusOr<kernels::Problem> ValidateTranspose(const v1::TransposeRequest& req,
                                                   const Limits& limits);
absl::StatusOr<kernels::Problem> ValidateReduce(const v1::ReduceRequest& req, const Limits& limits);
absl::StatusOr<kernels::Problem> ValidateProfile(const v1::ProfileRequest& req,
                                                 const Limits& limits);

}  // namespace gpucompute::server
