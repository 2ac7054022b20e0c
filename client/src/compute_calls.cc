// MatMul, Transpose and Reduce: operands and placement written to the wire, results read back.
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <grpcpp/support/byte_buffer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client_core.h"
#include "gpucompute/client.h"
#include "unary_call.h"
#include "wire/compute_wire.h"

namespace gpucompute {

namespace {

// Fails early with a clear message instead of gRPC's "failed to serialize"
// when the request cannot fit one protobuf message.
absl::Status CheckRequestSize(const char* method, int64_t payload_bytes, int max_bytes) {
  constexpr int64_t kEnvelope = 256;  // tags, shapes, variant name
  if (payload_bytes + kEnvelope > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s failed: request payload is %d bytes (%.2f GiB); a gRPC message is limited to %d "
        "bytes",
        method, payload_bytes, payload_bytes / double(1LL << 30), max_bytes));
  }
  return absl::OkStatus();
}

// A matrix's bytes as a slice the request sends without copying them.
grpc::Slice PayloadSlice(Matrix&& m) {
  return wire::SliceOwning(std::make_unique<std::string>(m.ReleaseBytes()), nullptr);
}

}  // namespace

Operand Operand::TensorId(std::string id) {
  Operand o;
  o.tensor_id_ = std::move(id);
  return o;
}

std::string Operand::Describe() const {
  if (is_tensor()) return absl::StrCat("tensor ", tensor_id_);
  if (is_shared_memory()) {
    const absl::StatusOr<DType> dtype = DTypeFromProto(tensor_dtype_, "dtype");
    return absl::StrCat(tensor_rows_, "x", tensor_cols_, " ",
                        dtype.ok() ? DTypeName(*dtype) : "(unknown dtype)", " in shared memory \"",
                        shm_region_, "\" at offset ", shm_offset_);
  }
  return matrix_.ShapeString();
}

absl::StatusOr<OpResult> Client::ComputeCall(const char* method, grpc::ByteBuffer request,
                                             const char* field,
                                             const std::optional<SharedMemoryView>& into,
                                             size_t replica) const {
  internal::Replica& target = (*replicas_)[replica];
  const internal::ClientCore& core = *target.core;
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  core.Prepare(&context);
  const grpc::Status status = internal::UnaryOnThisThread(
      target.NextStub(), &context, absl::StrCat("/gpucompute.v1.Compute/", method), request,
      &response, core.busy_poll);
  if (absl::Status st = core.Finish(method, status); !st.ok()) return st;
  auto malformed = [&](absl::string_view why) {
    return absl::InternalError(
        absl::StrCat(method, " failed: the server returned a malformed result: ", why));
  };
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return malformed("unreadable message");
  // Read in place; the payload is copied once, into the result's own buffer.
  auto parsed = wire::ParseComputeResponse(slices);
  if (!parsed.ok()) return malformed(parsed.status().message());
  const wire::Matrix& out = parsed->output;
  const absl::StatusOr<DType> dtype = DTypeFromProto(out.dtype, absl::StrCat(field, ".dtype"));
  if (!dtype.ok()) return malformed(dtype.status().message());
  if (out.payload == wire::Matrix::Payload::kSharedMemory) {  // written into the view
    if (!into) return malformed(absl::StrCat(field, " in shared memory, which was not asked for"));
    // The slice the server checked carries a byte size only.
    if (out.dtype != ToProto(into->dtype) || out.rows != into->rows || out.cols != into->cols) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " failed: the result is ", out.rows, "x", out.cols, " ",
                       DTypeName(*dtype), " but the output view is ", into->rows, "x", into->cols,
                       " ", DTypeName(into->dtype), " (the result's bytes were written into it)"));
    }
    OpResult result;
    result.report = std::move(parsed->report);
    result.in_shared_memory = true;
    return result;
  }
  if (out.payload == wire::Matrix::Payload::kTensorId) {  // kept on the server
    if (out.tensor_id.empty()) return malformed(absl::StrCat(field, ".tensor_id is empty"));
    v1::TensorInfo info;
    info.set_id(out.tensor_id);
    info.set_dtype(static_cast<v1::DType>(out.dtype));
    info.set_rows(out.rows);
    info.set_cols(out.cols);
    info.set_bytes(out.rows * out.cols * DTypeSize(*dtype));
    // Held by the replica that ran the op.
    replicas_->Learn(internal::InstanceOf(info.id()), replica);
    OpResult result;
    result.report = std::move(parsed->report);
    result.tensor = Tensor(target.core, std::move(info), *dtype);
    return result;
  }
  // Appended piece by piece: a std::string(n, '\0') would first write every
  // byte with zeros.
  std::string bytes;
  bytes.reserve(size_t(out.data_bytes));
  for (const auto& piece : out.data) bytes.append(piece.data(), piece.size());
  absl::StatusOr<Matrix> matrix = Matrix::FromBytes(*dtype, out.rows, out.cols, std::move(bytes));
  if (!matrix.ok()) return malformed(absl::StrCat(field, ": ", matrix.status().message()));
  OpResult result;
  result.output = std::move(*matrix);
  result.report = std::move(parsed->report);
  return result;
}

namespace {

// Writes `operand` as Matrix field `field`: its bytes inline (moved, not
// copied), its tensor id, or its shared-memory slice.
void WriteOperand(wire::MessageWriter* request, int field, Operand& operand, v1::DType dtype,
                  int64_t rows, int64_t cols, const std::string& tensor_id,
                  const wire::SharedMemorySlice& slice) {
  if (!tensor_id.empty()) {
    request->MatrixTensorField(field, dtype, rows, cols, tensor_id);
  } else if (!slice.region.empty()) {
    request->MatrixSharedMemoryField(field, dtype, rows, cols, slice);
  } else {
    const auto d = ToProto(operand.matrix().dtype());
    const int64_t r = operand.matrix().rows(), c = operand.matrix().cols();
    request->MatrixField(field, d, r, c, PayloadSlice(std::move(operand.matrix())));
  }
}

void WritePlacement(wire::MessageWriter* request, bool keep, int64_t ttl_seconds,
                    const std::optional<SharedMemoryView>& into) {
  if (!keep && !into) return;  // the default: the result comes back inline
  wire::OutputPlacement output;
  output.keep = keep;
  output.ttl_seconds = ttl_seconds;
  if (into) {
    output.has_shared_memory = true;
    output.shared_memory = wire::SharedMemorySlice{into->region, into->offset, into->byte_size()};
  }
  request->OutputPlacementField(10, output);
}

wire::SharedMemorySlice SliceOf(const std::string& region, int64_t offset, int64_t bytes) {
  return wire::SharedMemorySlice{region, offset, bytes};
}

}  // namespace

absl::StatusOr<OpResult> Client::MatMul(Operand a, Operand b, const MatMulOptions& options) const {
  if (absl::Status st =
          CheckRequestSize("MatMul", a.inline_bytes() + b.inline_bytes(), max_message_bytes_);
      !st.ok()) {
    return st;
  }
  wire::MessageWriter request;  // MatMulRequest
  WriteOperand(&request, 1, a, a.tensor_dtype_, a.tensor_rows_, a.tensor_cols_, a.tensor_id_,
               SliceOf(a.shm_region_, a.shm_offset_, a.shm_bytes_));
  WriteOperand(&request, 2, b, b.tensor_dtype_, b.tensor_rows_, b.tensor_cols_, b.tensor_id_,
               SliceOf(b.shm_region_, b.shm_offset_, b.shm_bytes_));
  if (!options.variant.empty()) request.BytesField(3, options.variant);
  if (options.allow_tf32) request.VarintField(4, 1);
  if (options.output_dtype) request.VarintField(5, uint64_t(ToProto(*options.output_dtype)));
  WritePlacement(&request, options.keep, options.ttl_seconds, options.output);
  const size_t replica = Route(a.is_tensor() ? a.tensor_id_ : b.tensor_id_,
                               a.is_shared_memory() || b.is_shared_memory() || options.output);
  return ComputeCall("MatMul", request.Finish(), "c", options.output, replica);
}

absl::StatusOr<OpResult> Client::Transpose(Operand input, const std::string& variant) const {
  return TransposeCall(std::move(input), OpOptions{.variant = variant});
}
absl::StatusOr<OpResult> Client::Transpose(Operand input, const OpOptions& options) const {
  return TransposeCall(std::move(input), options);
}

absl::StatusOr<OpResult> Client::TransposeCall(Operand input, const OpOptions& options) const {
  if (absl::Status st = CheckRequestSize("Transpose", input.inline_bytes(), max_message_bytes_);
      !st.ok()) {
    return st;
  }
  if (options.output_dtype) {
    return absl::InvalidArgumentError(
        "Transpose failed: output_dtype is for MatMul and Reduce; a transpose keeps its input's "
        "dtype");
  }
  wire::MessageWriter request;  // TransposeRequest
  WriteOperand(&request, 1, input, input.tensor_dtype_, input.tensor_rows_, input.tensor_cols_,
               input.tensor_id_, SliceOf(input.shm_region_, input.shm_offset_, input.shm_bytes_));
  if (!options.variant.empty()) request.BytesField(2, options.variant);
  WritePlacement(&request, options.keep, options.ttl_seconds, options.output);
  const size_t replica =
      Route(input.tensor_id_, input.is_shared_memory() || options.output.has_value());
  return ComputeCall("Transpose", request.Finish(), "output", options.output, replica);
}

absl::StatusOr<OpResult> Client::Reduce(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                        const std::string& variant) const {
  return ReduceCall(std::move(input), op, axis, OpOptions{.variant = variant});
}
absl::StatusOr<OpResult> Client::Reduce(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                        const OpOptions& options) const {
  return ReduceCall(std::move(input), op, axis, options);
}

absl::StatusOr<OpResult> Client::ReduceCall(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                            const OpOptions& options) const {
  if (absl::Status st = CheckRequestSize("Reduce", input.inline_bytes(), max_message_bytes_);
      !st.ok()) {
    return st;
  }
  wire::MessageWriter request;  // ReduceRequest
  WriteOperand(&request, 1, input, input.tensor_dtype_, input.tensor_rows_, input.tensor_cols_,
               input.tensor_id_, SliceOf(input.shm_region_, input.shm_offset_, input.shm_bytes_));
  if (op != v1::REDUCE_OP_SUM) request.VarintField(2, uint64_t(op));
  if (axis != v1::REDUCE_AXIS_ALL) request.VarintField(3, uint64_t(axis));
  if (!options.variant.empty()) request.BytesField(4, options.variant);
  if (options.output_dtype) request.VarintField(5, uint64_t(ToProto(*options.output_dtype)));
  WritePlacement(&request, options.keep, options.ttl_seconds, options.output);
  const size_t replica =
      Route(input.tensor_id_, input.is_shared_memory() || options.output.has_value());
  return ComputeCall("Reduce", request.Finish(), "output", options.output, replica);
}

}  // namespace gpucompute
