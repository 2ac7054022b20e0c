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

// A SharedMemorySlice: bytes of a registered shared-memory region.
struct SharedMemorySlice {
  std::string region;
  int64_t offset = 0;
  int64_t byte_size = 0;
};

// A Matrix whose payload stays where it arrived. The payload is a oneof:
// inline bytes, a tensor held by the server, or a shared-memory slice. As
// in protobuf, the member parsed last is the one set, and the others are
// empty: data (and data_bytes), tensor_id and shared_memory hold their
// defaults unless `payload` names them. A shared_memory parsed while it is
// already the member set merges into it; after another member it starts
// fresh.
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

// Where a result goes (OutputPlacement, field 10 of the requests). A field
// 10 (or a shared_memory in it) sent twice merges, as in protobuf.
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
  int output_dtype = 0;     // MatMul and Reduce: 0 = the inputs' dtype
  bool has_output = false;  // field 10 was present
  OutputPlacement output;
};

// Parses the request message of `op` from `slices` (which must outlive the
// result: each Matrix's `data` spans point into them; tensor_id and
// shared_memory, being small, are copied). Any bytes get the verdict and the
// field values that protobuf's generated classes (ParseFromArray) give them:
// repeated fields merge, oneof members replace each other, unknown fields
// (groups included, and known numbers under another wire type) are skipped,
// strings must be UTF-8, messages nest at most 100 deep; what protobuf
// refuses gives INVALID_ARGUMENT. tests/fuzz/wire_request_fuzz checks this;
// a field added to compute.proto that protobuf parses (a message, a string,
// a oneof member) must be read or checked here too, or the fuzzer objects.
absl::StatusOr<ComputeRequest> ParseComputeRequest(v1::Op op,
                                                   const std::vector<grpc::Slice>& slices);

// A MatMulResponse, TransposeResponse or ReduceResponse (1 = Matrix,
// 2 = ExecutionReport) read the same way (the report by protobuf itself).
// The matrix carries inline data, or a tensor_id (the result was kept on the
// server), or a shared_memory slice (the result was written there).
struct ComputeResponse {
  Matrix output;
  v1::ExecutionReport report;
};
absl::StatusOr<ComputeResponse> ParseComputeResponse(const std::vector<grpc::Slice>& slices);

// A DownloadResponse read in place: the TensorInfo when the message has one
// (field 1, merged as protobuf would), and the data bytes (field 2, the
// later one winning) as pieces inside the slices.
struct DownloadResponse {
  bool has_info = false;
  v1::TensorInfo info;
  std::vector<absl::Span<const char>> data;
  int64_t data_bytes = 0;
};
absl::StatusOr<DownloadResponse> ParseDownloadResponse(const std::vector<grpc::Slice>& slices);

// An UploadRequest read in place: the shape fields, the shared_memory slice
// when present (merged as protobuf would), and the data bytes (field 5, the
// later one winning) as pieces inside the slices, which must outlive it.
struct UploadRequest {
  int dtype = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ttl_seconds = 0;
  bool has_shared_memory = false;
  SharedMemorySlice shared_memory;
  std::vector<absl::Span<const char>> data;
  int64_t data_bytes = 0;
};
absl::StatusOr<UploadRequest> ParseUploadRequest(const std::vector<grpc::Slice>& slices);

// An EchoRequest read in place: response_bytes (field 1, the later one
// winning) and the payload's size (field 2), whose bytes are never copied.
struct EchoRequest {
  int64_t response_bytes = 0;
  int64_t payload_bytes = 0;
};
absl::StatusOr<EchoRequest> ParseEchoRequest(const std::vector<grpc::Slice>& slices);

// Copies the pieces one after another into `dst`.
void Gather(const std::vector<absl::Span<const char>>& pieces, char* dst);

// Writes a message field by field; a matrix payload goes out as its own
// slice, never copied. Strings (tensor_id, region, BytesField for a string
// field) must be UTF-8: protobuf refuses the message otherwise.
class MessageWriter {
 public:
  void VarintField(int field, uint64_t value);
  void BytesField(int field, const std::string& value);
  // A bytes field whose value is `payload`, sent without a copy.
  void SliceField(int field, grpc::Slice payload);
  // A bytes field whose value is `pieces` one after another, none copied
  // (each is moved from).
  void SlicesField(int field, absl::Span<grpc::Slice> pieces);
  // A Matrix with inline data: `payload`.
  void MatrixField(int field, v1::DType dtype, int64_t rows, int64_t cols, grpc::Slice payload);
  // A Matrix whose payload is a tensor held by the server (Matrix.tensor_id).
  void MatrixTensorField(int field, v1::DType dtype, int64_t rows, int64_t cols,
                         const std::string& tensor_id);
  // A Matrix whose payload lies in a shared-memory region (Matrix.shared_memory).
  void MatrixSharedMemoryField(int field, v1::DType dtype, int64_t rows, int64_t cols,
                               const SharedMemorySlice& slice);
  // An OutputPlacement (field 10 of the requests); its shared_memory only
  // when output.has_shared_memory.
  void OutputPlacementField(int field, const OutputPlacement& output);
  grpc::ByteBuffer Finish();

 private:
  std::vector<grpc::Slice> slices_;
  std::string pending_;  // small fields not yet in a slice
};

// A MatMulResponse, TransposeResponse or ReduceResponse (all: 1 = Matrix,
// 2 = ExecutionReport) whose matrix payload is `payload`, sent without a copy.
grpc::ByteBuffer EncodeComputeResponse(v1::DType dtype, int64_t rows, int64_t cols,
                                       grpc::Slice payload, const v1::ExecutionReport& report);

// The same response whose matrix carries no data but names where the result
// is: a tensor kept on the server (OutputPlacement.keep), or the
// shared-memory slice it was written to (OutputPlacement.shared_memory).
grpc::ByteBuffer EncodeComputeResponseWithTensor(v1::DType dtype, int64_t rows, int64_t cols,
                                                 const std::string& tensor_id,
                                                 const v1::ExecutionReport& report);
grpc::ByteBuffer EncodeComputeResponseWithSharedMemory(v1::DType dtype, int64_t rows, int64_t cols,
                                                       const SharedMemorySlice& slice,
                                                       const v1::ExecutionReport& report);

// A slice over `buffer`'s bytes that hands the buffer to `release` once gRPC
// has sent it.
grpc::Slice SliceOwning(std::unique_ptr<std::string> buffer,
                        std::function<void(std::unique_ptr<std::string>)> release);

}  // namespace gpucompute::wire
