// MatMul, Transpose and Reduce messages read straight from the received gRPC
// slices and written around the result buffer, so protobuf never copies a
// payload: parsing a 64 MiB `bytes` field copies it (and, past protobuf's
// 50 MB reservation, grows and copies the string again), and serializing a
// response copies it once more. The wire format is compute.proto's; clients
// see ordinary protobuf messages.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/v1/compute.pb.h"
#include "server/validate.h"

namespace gpucompute::server {

struct WireMatrix {
  MatrixShape shape;                            // data_bytes = total size of `data`
  std::vector<absl::Span<const char>> data;     // the payload, in order, inside the slices
};

// The fields of a MatMulRequest (a, b), TransposeRequest or ReduceRequest
// (input in `a`).
struct WireRequest {
  WireMatrix a;
  WireMatrix b;
  std::string variant;
  bool allow_tf32 = false;
  int reduce_op = 0;
  int reduce_axis = 0;
};

// Parses the request message of `op` from `slices` (which must outlive the
// result: its spans point into them). Malformed input gives INVALID_ARGUMENT.
absl::StatusOr<WireRequest> ParseComputeRequest(kernels::Op op,
                                                const std::vector<grpc::Slice>& slices);

// Copies the pieces one after another into `dst`.
void Gather(const std::vector<absl::Span<const char>>& pieces, char* dst);

// A MatMulResponse, TransposeResponse or ReduceResponse (all: 1 = Matrix,
// 2 = ExecutionReport) whose matrix payload is `payload`, sent without a copy.
grpc::ByteBuffer EncodeComputeResponse(v1::DType dtype, int64_t rows, int64_t cols,
                                       grpc::Slice payload, const v1::ExecutionReport& report);

// A slice over `buffer`'s bytes that hands the buffer to `release` once gRPC
// has sent it.
grpc::Slice SliceOwning(std::unique_ptr<std::string> buffer,
                        std::function<void(std::unique_ptr<std::string>)> release);

}  // namespace gpucompute::server
