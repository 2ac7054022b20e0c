// MatMul, Transpose and Reduce messages read straight from gRPC slices and
// written around a payload buffer, so protobuf never copies a matrix:
// parsing a 64 MiB `bytes` field copies it (and, past protobuf's 50 MB
// reservation, grows and copies the string again), and serializing copies it
// once more. The bytes are compute.proto's wire format: peers that use the
// generated classes see ordinary messages.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute::wire {

namespace v1 = ::gpucompute::v1;

// A Matrix whose payload stays where it arrived.
// A SharedMemorySlice: bytes of a registered shared-memory region.
struct SharedMemorySlice {
  std::string region;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// A Matrix whose payload stays where it arrived. The payload is a oneof:
// inline bytes, a tensor held by the server, or a shared-memory slice.
struct Matrix {
  enum class Payload { kNone, kData, kTensorId, kSharedMemory };
  int dtype = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  Payload payload = Payload::kNone;          // which member of the oneof was set last
  int64_t data_bytes = 0;                    // total size of `data`
  std::vector<absl::Span<const char>> data;  // the payload, in order, inside the slices
  std::string tensor_id;                     // payload == kTensorId
  SharedMemorySlice shared_memory;           // payload == kSharedMemory
};

// Where a result goes (OutputPlacement, field 10 of the requests).
struct OutputPlacement {
  bool keep = false;
  bool has_shared_memory = false;  // shared_memory was present
  SharedMemorySlice shared_memory;
  int64_t ttl_seconds = 0;
};

// The fields of a MatMulRequest (a, b), TransposeRequest or ReduceRequest
// (input in `a`).
struct ComputeRequest {
  Matrix a;
  Matrix b;
  std::string variant;
  bool allow_tf32 = false;
  int reduce_op = 0;
  int reduce_axis = 0;
  bool has_output = false;  // field 10 was present
  OutputPlacement output;
};

// Parses the request message of `op` from `slices` (which must outlive the
// result: its spans point into them). Any bytes get the verdict and the field
// values that protobuf's generated classes (ParseFromArray) give them:
// repeated fields merge, unknown fields (groups included, and known numbers
// under another wire type) are skipped, strings must be UTF-8; what protobuf
// refuses gives INVALID_ARGUMENT. tests/fuzz/wire_request_fuzz checks this;
// a field added to compute.proto that protobuf parses (a message, a string,
// a oneof member) must be read or checked here too, or the fuzzer objects.
absl::StatusOr<ComputeRequest> ParseComputeRequest(v1::Op op,
                                                   const std::vector<grpc::Slice>& slices);

// A MatMulResponse, TransposeResponse or ReduceResponse (1 = Matrix,
// 2 = ExecutionReport) read the same way (the report by protobuf itself).
struct ComputeResponse {
  Matrix output;
  v1::ExecutionReport report;
};
absl::StatusOr<ComputeResponse> ParseComputeResponse(const std::vector<grpc::Slice>& slices);

// Copies the pieces one after another into `dst`.
void Gather(const std::vector<absl::Span<const char>>& pieces, char* dst);

// Writes a message field by field; a matrix payload goes out as its own
// slice, never copied.
class MessageWriter {
 public:
  void VarintField(int field, uint64_t value);
  void BytesField(int field, const std::string& value);
  void MatrixField(int field, v1::DType dtype, int64_t rows, int64_t cols, grpc::Slice payload);
  grpc::ByteBuffer Finish();

 private:
  std::vector<grpc::Slice> slices_;
  std::string pending_;  // small fields not yet in a slice
};

// A MatMulResponse, TransposeResponse or ReduceResponse (all: 1 = Matrix,
// 2 = ExecutionReport) whose matrix payload is `payload`, sent without a copy.
grpc::ByteBuffer EncodeComputeResponse(v1::DType dtype, int64_t rows, int64_t cols,
                                       grpc::Slice payload, const v1::ExecutionReport& report);

// A slice over `buffer`'s bytes that hands the buffer to `release` once gRPC
// has sent it.
grpc::Slice SliceOwning(std::unique_ptr<std::string> buffer,
                        std::function<void(std::unique_ptr<std::string>)> release);

}  // namespace gpucompute::wire
