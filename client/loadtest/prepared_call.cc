// The load test's requests, encoded once before the rows run, and their
// responses checked.
#include <grpcpp/impl/codegen/proto_utils.h>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpucompute/client.h"
#include "grpc/health/v1/health.pb.h"
#include "loadtest/load.h"
#include "wire/compute_wire.h"

namespace gpucompute::loadtest {

namespace {

template <typename Message>
absl::Status Serialize(const Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  grpc::Status st = grpc::SerializationTraits<Message>::Serialize(message, out, &own);
  if (!st.ok()) return absl::InternalError(absl::StrCat("serializing: ", st.error_message()));
  return absl::OkStatus();
}

absl::StatusOr<Matrix> RandomInput(const Workload& w, int64_t rows, int64_t cols, uint64_t salt) {
  return Matrix::Random(w.dtype, rows, cols, w.seed * 1000003 + salt);
}

absl::Status CheckOutput(const Workload& w, const wire::Matrix& out, bool kept, bool shm) {
  if (shm) {
    if (out.payload != wire::Matrix::Payload::kSharedMemory || out.rows != w.OutputRows() ||
        out.cols != w.OutputCols()) {
      return absl::InternalError(
          absl::StrFormat("response names no %dx%d shared-memory result (rows %d, cols %d)",
                          w.OutputRows(), w.OutputCols(), out.rows, out.cols));
    }
    return absl::OkStatus();
  }
  if (kept) {
    if (out.payload != wire::Matrix::Payload::kTensorId || out.tensor_id.empty() ||
        out.rows != w.OutputRows() || out.cols != w.OutputCols()) {
      return absl::InternalError(
          absl::StrFormat("response holds no kept %dx%d tensor (rows %d, cols %d, tensor_id '%s')",
                          w.OutputRows(), w.OutputCols(), out.rows, out.cols, out.tensor_id));
    }
    return absl::OkStatus();
  }
  const int64_t bytes = w.ResponsePayloadBytes();
  if (out.rows != w.OutputRows() || out.cols != w.OutputCols() || out.data_bytes != bytes) {
    return absl::InternalError(
        absl::StrFormat("response holds a %dx%d matrix of %d bytes, expected %dx%d of %d bytes",
                        out.rows, out.cols, out.data_bytes, w.OutputRows(), w.OutputCols(), bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedCall> PreparedCall::Create(const Workload& w, const std::string& variant,
                                                  const TensorPlacement* tensors,
                                                  const SharedMemoryPlacement* shm) {
  PreparedCall call;
  call.workload_ = w;
  if (tensors != nullptr || shm != nullptr) {
    // Operands by id and the output kept, or operands and output in shared
    // memory: the same fields as below, written with the wire writer (the
    // MatMul, Transpose and Reduce field numbers).
    wire::MessageWriter request;
    const v1::DType dtype = ToProto(w.dtype);
    const int64_t es = DTypeSize(w.dtype);
    wire::OutputPlacement keep;
    if (shm != nullptr) {
      call.shm_output_ = true;
      keep.has_shared_memory = true;
      keep.shared_memory = {shm->region, shm->out_offset, w.OutputRows() * w.OutputCols() * es};
    } else {
      call.releaser_ = tensors->releaser;
      keep.keep = true;
      keep.ttl_seconds = tensors->ttl_seconds;
    }
    auto operand = [&](int field, int64_t rows, int64_t cols, bool is_b) {
      if (shm != nullptr) {
        request.MatrixSharedMemoryField(
            field, dtype, rows, cols,
            {shm->region, is_b ? shm->b_offset : shm->a_offset, rows * cols * es});
      } else {
        request.MatrixTensorField(field, dtype, rows, cols, is_b ? tensors->b : tensors->a);
      }
    };
    switch (w.op) {
      case v1::OP_MATMUL:
        operand(1, w.m, w.k, false);
        operand(2, w.k, w.n, true);
        if (!variant.empty()) request.BytesField(3, variant);
        if (w.allow_tf32) request.VarintField(4, 1);
        call.method_ = "/gpucompute.v1.Compute/MatMul";
        break;
      case v1::OP_TRANSPOSE:
        operand(1, w.m, w.n, false);
        if (!variant.empty()) request.BytesField(2, variant);
        call.method_ = "/gpucompute.v1.Compute/Transpose";
        break;
      case v1::OP_REDUCE:
        operand(1, w.m, w.n, false);
        if (w.reduce_op != v1::REDUCE_OP_SUM) request.VarintField(2, uint64_t(w.reduce_op));
        if (w.axis != v1::REDUCE_AXIS_ALL) request.VarintField(3, uint64_t(w.axis));
        if (!variant.empty()) request.BytesField(4, variant);
        call.method_ = "/gpucompute.v1.Compute/Reduce";
        break;
      default:
        return absl::InvalidArgumentError("load test: op must be matmul, transpose or reduce");
    }
    request.OutputPlacementField(10, keep);
    call.request_ = request.Finish();
    return call;
  }
  absl::Status st;
  switch (w.op) {
    case v1::OP_MATMUL: {
      auto a = RandomInput(w, w.m, w.k, 1);
      if (!a.ok()) return a.status();
      auto b = RandomInput(w, w.k, w.n, 2);
      if (!b.ok()) return b.status();
      v1::MatMulRequest request;
      MoveToProto(std::move(*a), request.mutable_a());
      MoveToProto(std::move(*b), request.mutable_b());
      request.set_variant(variant);
      request.set_allow_tf32(w.allow_tf32);
      call.method_ = "/gpucompute.v1.Compute/MatMul";
      st = Serialize(request, &call.request_);
      break;
    }
    case v1::OP_TRANSPOSE: {
      auto input = RandomInput(w, w.m, w.n, 1);
      if (!input.ok()) return input.status();
      v1::TransposeRequest request;
      MoveToProto(std::move(*input), request.mutable_input());
      request.set_variant(variant);
      call.method_ = "/gpucompute.v1.Compute/Transpose";
      st = Serialize(request, &call.request_);
      break;
    }
    case v1::OP_REDUCE: {
      auto input = RandomInput(w, w.m, w.n, 1);
      if (!input.ok()) return input.status();
      v1::ReduceRequest request;
      MoveToProto(std::move(*input), request.mutable_input());
      request.set_op(w.reduce_op);
      request.set_axis(w.axis);
      request.set_variant(variant);
      call.method_ = "/gpucompute.v1.Compute/Reduce";
      st = Serialize(request, &call.request_);
      break;
    }
    default: return absl::InvalidArgumentError("load test: op must be matmul, transpose or reduce");
  }
  if (!st.ok()) return st;
  return call;
}

PreparedCall PreparedCall::HealthCheck() {
  PreparedCall call;
  call.method_ = "/grpc.health.v1.Health/Check";
  call.health_check_ = true;
  // An empty HealthCheckRequest (the server as a whole) is zero bytes.
  call.request_ = grpc::ByteBuffer(nullptr, 0);
  return call;
}

PreparedCall PreparedCall::ServiceCall() {
  PreparedCall call;
  call.method_ = "/gpucompute.v1.Compute/ListTensors";
  call.service_call_ = true;
  call.request_ = grpc::ByteBuffer(nullptr, 0);  // an empty ListTensorsRequest
  return call;
}

PreparedCall PreparedCall::Echo(const PreparedCall& op_call) {
  PreparedCall call = op_call;
  call.echo_ = true;
  return call;
}

PreparedCall PreparedCall::ServerEcho(const PreparedCall& op_call, int64_t response_bytes) {
  PreparedCall call;
  call.method_ = "/gpucompute.v1.Compute/Echo";
  call.server_echo_bytes_ = response_bytes;
  v1::EchoRequest echo;
  echo.set_response_bytes(response_bytes);
  std::vector<grpc::Slice> slices;
  if (op_call.request_.Dump(&slices).ok()) {
    std::string* payload = echo.mutable_payload();
    for (const grpc::Slice& s : slices) payload->append(s.begin(), s.end());
  }
  grpc::Slice serialized(echo.SerializeAsString());
  call.request_ = grpc::ByteBuffer(&serialized, 1);
  return call;
}

absl::Status PreparedCall::ParseResponse(grpc::ByteBuffer* buffer,
                                         v1::ExecutionReport* report) const {
  if (server_echo_bytes_ >= 0) {
    // An EchoResponse: field 1 and the payload's length, then the payload.
    const int64_t least = server_echo_bytes_ + 2;
    if (int64_t(buffer->Length()) < least) {
      return absl::InternalError(
          absl::StrCat("Echo response of ", buffer->Length(), " bytes, expected at least ", least));
    }
    return absl::OkStatus();
  }
  if (service_call_) {
    v1::ListTensorsResponse list;
    grpc::Status st =
        grpc::SerializationTraits<v1::ListTensorsResponse>::Deserialize(buffer, &list);
    if (!st.ok()) return absl::InternalError("ListTensors response could not be parsed");
    return absl::OkStatus();
  }
  if (health_check_) {
    grpc::health::v1::HealthCheckResponse health;
    grpc::Status st = grpc::SerializationTraits<grpc::health::v1::HealthCheckResponse>::Deserialize(
        buffer, &health);
    if (!st.ok()) return absl::InternalError("health response could not be parsed");
    if (health.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::UnavailableError("server is not SERVING");
    }
    return absl::OkStatus();
  }
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return absl::InternalError("response could not be read");
  auto response = wire::ParseComputeResponse(slices);
  if (!response.ok()) return response.status();
  if (releaser_ != nullptr && response->output.payload == wire::Matrix::Payload::kTensorId &&
      !response->output.tensor_id.empty()) {
    releaser_->Add(response->output.tensor_id);  // whatever the checks below say
  }
  if (absl::Status s = CheckOutput(workload_, response->output, releaser_ != nullptr, shm_output_);
      !s.ok()) {
    return s;
  }
  *report = std::move(response->report);
  return absl::OkStatus();
}

}  // namespace gpucompute::loadtest
