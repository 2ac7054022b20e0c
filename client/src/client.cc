#include "gpucompute/client.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client_core.h"
#include "unary_call.h"
#include "wire/compute_wire.h"

namespace gpucompute {
namespace {

using google::protobuf::internal::WireFormatLite;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("error reading ", what, " '", path, "'"));
  }
  return std::move(contents).str();
}

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

std::string EncodeHealthCheckRequest(const std::string& service) {
  std::string out;
  if (service.empty()) return out;  // proto3 leaves default fields out
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.WriteTag(WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
  coded.WriteVarint32(static_cast<uint32_t>(service.size()));
  coded.WriteString(service);
  return out;
}

absl::StatusOr<HealthStatus> DecodeHealthCheckResponse(const std::string& bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  uint32_t status = 0;
  while (uint32_t tag = in.ReadTag()) {
    if (tag == WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_VARINT)) {
      if (!in.ReadVarint32(&status)) break;
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return absl::InternalError("Health failed: malformed HealthCheckResponse");
    }
  }
  if (status > 3) status = 0;
  return static_cast<HealthStatus>(status);
}

}  // namespace

Tensor::Tensor(Tensor&& other) noexcept
    : core_(std::move(other.core_)), info_(std::move(other.info_)) {
  other.info_.Clear();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    (void)Release();
    core_ = std::move(other.core_);
    info_ = std::move(other.info_);
    other.info_.Clear();
  }
  return *this;
}

Tensor::~Tensor() { (void)Release(); }

DType Tensor::dtype() const {
  return info_.dtype() == v1::DTYPE_FLOAT64 ? DType::kFloat64 : DType::kFloat32;
}

absl::StatusOr<Matrix> Tensor::Download(int64_t chunk_bytes) const {
  if (!*this || core_ == nullptr) return absl::FailedPreconditionError("Download: empty Tensor");
  return core_->Download(id(), chunk_bytes, /*release=*/false, nullptr);
}

absl::Status Tensor::Release() {
  if (!*this || core_ == nullptr) return absl::OkStatus();
  const std::string released_id = Detach();
  absl::StatusOr<v1::ReleaseTensorsResponse> r = core_->Release({released_id});
  if (!r.ok()) return r.status();
  if (r->released() == 0) {
    return absl::NotFoundError(
        absl::StrCat("ReleaseTensors: the server no longer held tensor ", released_id));
  }
  return absl::OkStatus();
}

std::string Tensor::Detach() {
  std::string id = info_.id();
  info_.Clear();
  return id;
}

Operand Operand::TensorId(std::string id) {
  Operand o;
  o.tensor_id_ = std::move(id);
  return o;
}

std::string Operand::Describe() const {
  if (is_tensor()) return absl::StrCat("tensor ", tensor_id_);
  if (is_shared_memory()) {
    return absl::StrCat(tensor_rows_, "x", tensor_cols_, " ",
                        tensor_dtype_ == v1::DTYPE_FLOAT64 ? "float64" : "float32",
                        " in shared memory \"", shm_region_, "\" at offset ", shm_offset_);
  }
  return matrix_.ShapeString();
}

void ApplyLargeMessageTransport(grpc::ChannelArguments* args) {
  // HTTP/2's largest frame: a 64 MiB matrix in 4 frames instead of 4096.
  args->SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  // Let a whole matrix be in flight before the first WINDOW_UPDATE instead of
  // waiting for the BDP estimator to grow the window from 64 KiB.
  args->SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  // Read the socket in MiB chunks, not 8 KiB ones: fewer syscalls and slices.
  args->SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4 << 20);
  args->SetInt(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10);
  args->SetInt(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 20);
}

const char* HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kServing: return "SERVING";
    case HealthStatus::kNotServing: return "NOT_SERVING";
    case HealthStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
    case HealthStatus::kUnknown: break;
  }
  return "UNKNOWN";
}

v1::DType ToProto(DType dtype) {
  return dtype == DType::kFloat32 ? v1::DTYPE_FLOAT32 : v1::DTYPE_FLOAT64;
}

void MoveToProto(Matrix&& matrix, v1::Matrix* out) {
  out->set_dtype(ToProto(matrix.dtype()));
  out->set_rows(matrix.rows());
  out->set_cols(matrix.cols());
  *out->mutable_data() = matrix.ReleaseBytes();
}

absl::StatusOr<Matrix> MoveFromProto(v1::Matrix* matrix, const std::string& field) {
  DType dtype;
  switch (matrix->dtype()) {
    case v1::DTYPE_FLOAT32: dtype = DType::kFloat32; break;
    case v1::DTYPE_FLOAT64: dtype = DType::kFloat64; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, ".dtype is ",
                                                     static_cast<int>(matrix->dtype()),
                                                     " (expected DTYPE_FLOAT32 or DTYPE_FLOAT64)"));
  }
  absl::StatusOr<Matrix> m =
      Matrix::FromBytes(dtype, matrix->rows(), matrix->cols(), std::move(*matrix->mutable_data()));
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", m.status().message()));
  return m;
}

namespace {

// Each enum's names as people type them: one table for both directions.
template <typename Enum>
struct Named {
  Enum value;
  const char* name;
};
constexpr Named<v1::ReduceOp> kReduceOps[] = {{v1::REDUCE_OP_SUM, "sum"},
                                              {v1::REDUCE_OP_MIN, "min"},
                                              {v1::REDUCE_OP_MAX, "max"},
                                              {v1::REDUCE_OP_MEAN, "mean"}};
constexpr Named<v1::ReduceAxis> kReduceAxes[] = {{v1::REDUCE_AXIS_ALL, "all"},
                                                 {v1::REDUCE_AXIS_PER_ROW, "per_row"},
                                                 {v1::REDUCE_AXIS_PER_COLUMN, "per_column"}};
constexpr Named<v1::Op> kOps[] = {
    {v1::OP_MATMUL, "matmul"}, {v1::OP_TRANSPOSE, "transpose"}, {v1::OP_REDUCE, "reduce"}};

template <typename Enum, size_t N>
const char* NameOf(const Named<Enum> (&table)[N], Enum value, const char* otherwise) {
  for (const Named<Enum>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return otherwise;
}

// The entry named `name`, or INVALID_ARGUMENT "expected sum, min, max or
// mean, got 'median'".
template <typename Enum, size_t N>
absl::StatusOr<Enum> ValueOf(const Named<Enum> (&table)[N], absl::string_view name) {
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (table[i].name == name) return table[i].value;
    absl::StrAppend(&expected, i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
  }
  return absl::InvalidArgumentError(absl::StrCat("expected ", expected, ", got '", name, "'"));
}

}  // namespace

const char* ReduceOpName(v1::ReduceOp op) { return NameOf(kReduceOps, op, "unknown"); }
const char* ReduceAxisName(v1::ReduceAxis axis) { return NameOf(kReduceAxes, axis, "unknown"); }
const char* OpName(v1::Op op) { return NameOf(kOps, op, "unspecified"); }

absl::StatusOr<v1::ReduceOp> ParseReduceOp(absl::string_view name) {
  return ValueOf(kReduceOps, name);
}
absl::StatusOr<v1::ReduceAxis> ParseReduceAxis(absl::string_view name) {
  return ValueOf(kReduceAxes, name);
}
absl::StatusOr<v1::Op> ParseOp(absl::string_view name) { return ValueOf(kOps, name); }

const char* ShapeSyntax(v1::Op op) { return op == v1::OP_MATMUL ? "MxKxN" : "MxN"; }

absl::StatusOr<OpShape> ParseShape(v1::Op op, absl::string_view text) {
  const bool matmul = op == v1::OP_MATMUL;
  const char* example = matmul ? "512x256x128" : "4096x4096";
  std::vector<int64_t> dims;
  for (absl::string_view part : absl::StrSplit(text, absl::ByAnyChar("xX"))) {
    int64_t d;
    if (!absl::SimpleAtoi(part, &d) || d < 1) {
      return absl::InvalidArgumentError(absl::StrCat("expected ", ShapeSyntax(op),
                                                     " with positive integers, e.g. ", example,
                                                     ", got '", text, "'"));
    }
    dims.push_back(d);
  }
  const size_t want = matmul ? 3 : 2;
  if (dims.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", want, " dimensions (",
                                                   ShapeSyntax(op), ", e.g. ", example, "), got '",
                                                   text, "'"));
  }
  // MxKxN: the order of a @ b, a M x K and b K x N.
  return matmul ? OpShape{.m = dims[0], .n = dims[2], .k = dims[1]}
                : OpShape{.m = dims[0], .n = dims[1], .k = 0};
}

std::string ShapeText(v1::Op op, const OpShape& shape) {
  if (op == v1::OP_MATMUL) return absl::StrCat(shape.m, "x", shape.k, "x", shape.n);
  return absl::StrCat(shape.m, "x", shape.n);
}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() = default;

std::string WithDefaultPort(const std::string& target) {
  std::string prefix, host = target;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(target, scheme)) {
      prefix = scheme;
      host = target.substr(prefix.size());
      break;
    }
  }
  if (prefix.empty() && target.find(':') != std::string::npos && target.front() != '[') {
    return target;  // host:port, unix:/path, or another scheme
  }
  if (host.empty() || host.find(',') != std::string::npos) return target;
  const size_t bracket = host.rfind(']');
  const size_t colon = host.rfind(':');
  const bool has_port = host.front() == '[' ? bracket != std::string::npos &&
                                                  colon != std::string::npos && colon > bracket
                                            : colon != std::string::npos;
  if (has_port) return target;
  return absl::StrCat(prefix, host, ":", kDefaultPort);
}

absl::StatusOr<Client> Client::Create(const ClientOptions& given) {
  ClientOptions options = given;
  std::vector<std::string> targets = given.targets;
  if (targets.empty()) targets.push_back(given.target);
  for (std::string& target : targets) {
    if (target.empty()) return absl::InvalidArgumentError("client target is empty");
    target = WithDefaultPort(target);
  }
  options.target = targets.front();
  if (options.deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("client deadline must be positive, got ",
                                                   absl::FormatDuration(options.deadline)));
  }
  if (!options.bearer_token.empty() && !options.bearer_token_file.empty()) {
    return absl::InvalidArgumentError("give the bearer token as a string or a file, not both");
  }
  if (options.connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("client connections must be at least 1, got ", options.connections));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "mutual TLS needs both a client certificate and its private key");
  }

  if (!options.lb_policy.empty() && options.lb_policy != "pick_first" &&
      options.lb_policy != "round_robin") {
    return absl::InvalidArgumentError(
        absl::StrCat("load-balancing policy must be pick_first or round_robin, got \"",
                     options.lb_policy, "\""));
  }

  Client client;
  client.target_ = options.target;
  client.targets_ = targets;
  client.deadline_ = options.deadline;

  std::string token = options.bearer_token;
  if (!options.bearer_token_file.empty()) {
    absl::StatusOr<std::string> contents =
        ReadWholeFile(options.bearer_token_file, "bearer token file");
    if (!contents.ok()) return contents.status();
    // The first line, as the server reads its --auth_token_file.
    token = std::string(absl::StripAsciiWhitespace(contents->substr(0, contents->find('\n'))));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("bearer token file '", options.bearer_token_file, "' is empty"));
    }
  }
  if (!token.empty()) client.authorization_ = absl::StrCat("Bearer ", token);

  const bool tls = options.use_tls || !options.tls_root_ca_file.empty() ||
                   !options.tls_cert_file.empty() || !options.tls_server_name.empty();
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_root_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadWholeFile(options.tls_root_ca_file, "TLS root CA file");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = std::move(*ca);
    }
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert =
          ReadWholeFile(options.tls_cert_file, "TLS client certificate file");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadWholeFile(options.tls_key_file, "TLS client key file");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (!options.tls_server_name.empty()) args.SetSslTargetNameOverride(options.tls_server_name);
  if (!options.lb_policy.empty()) {
    args.SetServiceConfigJSON(
        absl::StrCat(R"({"loadBalancingConfig":[{")", options.lb_policy, R"(":{}}]})"));
  }
  if (options.large_message_transport) ApplyLargeMessageTransport(&args);
  // Otherwise channels with equal arguments share one connection.
  if (options.connections > 1) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto replicas = std::make_shared<internal::Replicas>();
  replicas->targets = targets;
  replicas->balanced = options.lb_policy == "round_robin";
  for (const std::string& target : targets) {
    auto replica = std::make_unique<internal::Replica>();
    for (int i = 0; i < options.connections; ++i) {
      replica->channels.push_back(grpc::CreateCustomChannel(target, credentials, args));
      replica->generic_stubs.push_back(
          std::make_unique<grpc::GenericStub>(replica->channels.back()));
    }
    auto core = std::make_shared<internal::ClientCore>();
    core->target = target;
    core->deadline = client.deadline_;
    core->authorization = client.authorization_;
    core->busy_poll = options.busy_poll;
    core->channel = replica->channels.front();
    core->stub = v1::Compute::NewStub(core->channel);
    replica->core = std::move(core);
    replicas->list.push_back(std::move(replica));
  }
  client.channels_ = (*replicas)[0].channels;
  client.stub_ = v1::Compute::NewStub(client.channels_.front());
  client.max_message_bytes_ = options.max_message_bytes;
  client.core_ = (*replicas)[0].core;
  client.replicas_ = std::move(replicas);
  return client;
}

size_t Client::Route(const std::string& tensor_id, bool shared_memory) const {
  if (!tensor_id.empty()) {
    const std::string instance = internal::InstanceOf(tensor_id);
    return replicas_->Index(instance, instance.empty() ? instance : WithDefaultPort(instance));
  }
  return shared_memory ? 0 : replicas_->Any();
}

void Client::Prepare(grpc::ClientContext* context) const { core_->Prepare(context); }

absl::Status Client::Finish(const char* method, const grpc::Status& status) const {
  return core_->Finish(method, status);
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
  if (out.dtype != v1::DTYPE_FLOAT32 && out.dtype != v1::DTYPE_FLOAT64) {
    return malformed(
        absl::StrCat(field, ".dtype is ", out.dtype, " (expected DTYPE_FLOAT32 or DTYPE_FLOAT64)"));
  }
  if (out.payload == wire::Matrix::Payload::kSharedMemory) {  // written into the view
    if (!into) return malformed(absl::StrCat(field, " in shared memory, which was not asked for"));
    // The slice the server checked carries a byte size only.
    if (out.dtype != ToProto(into->dtype) || out.rows != into->rows || out.cols != into->cols) {
      return absl::InvalidArgumentError(
          absl::StrCat(method, " failed: the result is ", out.rows, "x", out.cols, " ",
                       out.dtype == v1::DTYPE_FLOAT32 ? "float32" : "float64",
                       " but the output view is ", into->rows, "x", into->cols, " ",
                       DTypeName(into->dtype), " (the result's bytes were written into it)"));
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
    info.set_bytes(out.rows * out.cols * (out.dtype == v1::DTYPE_FLOAT32 ? 4 : 8));
    // Held by the replica that ran the op.
    replicas_->Learn(internal::InstanceOf(info.id()), replica);
    OpResult result;
    result.report = std::move(parsed->report);
    result.tensor = Tensor(target.core, std::move(info));
    return result;
  }
  // Appended piece by piece: a std::string(n, '\0') would first write every
  // byte with zeros.
  std::string bytes;
  bytes.reserve(size_t(out.data_bytes));
  for (const auto& piece : out.data) bytes.append(piece.data(), piece.size());
  absl::StatusOr<Matrix> matrix =
      Matrix::FromBytes(out.dtype == v1::DTYPE_FLOAT32 ? DType::kFloat32 : DType::kFloat64,
                        out.rows, out.cols, std::move(bytes));
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
  WritePlacement(&request, options.keep, options.ttl_seconds, options.output);
  const size_t replica =
      Route(input.tensor_id_, input.is_shared_memory() || options.output.has_value());
  return ComputeCall("Reduce", request.Finish(), "output", options.output, replica);
}

absl::StatusOr<Tensor> Client::Upload(const SharedMemoryView& view,
                                      const UploadOptions& options) const {
  v1::UploadRequest first;
  first.set_dtype(ToProto(view.dtype));
  first.set_rows(view.rows);
  first.set_cols(view.cols);
  first.set_ttl_seconds(options.ttl_seconds);
  v1::SharedMemorySlice* slice = first.mutable_shared_memory();
  slice->set_region(view.region);
  slice->set_offset(view.offset);
  slice->set_byte_size(view.byte_size());
  v1::TensorInfo info;
  grpc::ClientContext context;
  Prepare(&context);
  auto writer = stub_->Upload(&context, &info);  // the first replica's, where regions are
  writer->Write(first);                          // when refused, Finish says why
  writer->WritesDone();
  if (absl::Status st = Finish("Upload", writer->Finish()); !st.ok()) return st;
  replicas_->Learn(info.server(), 0);
  return Tensor(core_, std::move(info));
}

absl::Status Client::Download(const std::string& id, const SharedMemoryView& into,
                              bool release) const {
  v1::DownloadRequest request;
  request.set_tensor_id(id);
  request.set_release(release);
  v1::SharedMemorySlice* slice = request.mutable_shared_memory();
  slice->set_region(into.region);
  slice->set_offset(into.offset);
  slice->set_byte_size(into.byte_size());
  const internal::ClientCore& core = *(*replicas_)[Route(id)].core;
  grpc::ClientContext context;
  core.Prepare(&context);
  auto reader = core.stub->Download(&context, request);
  v1::DownloadResponse response;
  v1::TensorInfo info;
  bool first = true;
  while (reader->Read(&response)) {
    if (first) info = response.info();
    first = false;
  }
  if (absl::Status st = core.Finish("Download", reader->Finish()); !st.ok()) return st;
  // The server checked the byte size; the shape is the client's to check.
  if (!first && (info.dtype() != ToProto(into.dtype) || info.rows() != into.rows ||
                 info.cols() != into.cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Download failed: tensor ", id, " is ", info.rows(), "x", info.cols(), " ",
        info.dtype() == v1::DTYPE_FLOAT32 ? "float32" : "float64", " but the view is ", into.rows,
        "x", into.cols, " ", DTypeName(into.dtype), " (its bytes were written into it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::SharedMemoryRegion> Client::RegisterSharedMemory(
    const v1::RegisterSharedMemoryRequest& request) const {
  v1::SharedMemoryRegion region;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st =
          Finish("RegisterSharedMemory", stub_->RegisterSharedMemory(&context, request, &region));
      !st.ok()) {
    return st;
  }
  return region;
}

absl::StatusOr<int64_t> Client::UnregisterSharedMemory(const std::string& name) const {
  v1::UnregisterSharedMemoryRequest request;
  request.set_name(name);
  v1::UnregisterSharedMemoryResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("UnregisterSharedMemory",
                               stub_->UnregisterSharedMemory(&context, request, &response));
      !st.ok()) {
    return st;
  }
  return response.unregistered();
}

absl::StatusOr<v1::ListSharedMemoryResponse> Client::ListSharedMemory() const {
  v1::ListSharedMemoryResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st =
          Finish("ListSharedMemory", stub_->ListSharedMemory(&context, {}, &response));
      !st.ok()) {
    return st;
  }
  return response;
}

absl::StatusOr<Tensor> Client::Upload(MatrixView matrix, const UploadOptions& options) const {
  if (options.chunk_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Upload: chunk_bytes must be positive, got ", options.chunk_bytes));
  }
  absl::StatusOr<int64_t> total = MatrixByteSize(matrix.dtype, matrix.rows, matrix.cols);
  if (!total.ok())
    return absl::InvalidArgumentError(absl::StrCat("Upload: ", total.status().message()));
  const int64_t chunk = std::min<int64_t>(options.chunk_bytes, max_message_bytes_ - 1024);
  const size_t replica = Route("");
  const std::shared_ptr<const internal::ClientCore>& core = (*replicas_)[replica].core;
  grpc::ClientContext context;
  core->Prepare(&context);
  // Messages are written as raw bytes: each chunk is copied once, from the
  // matrix into a buffer that gRPC sends as it is (the generated stub would
  // copy it into a message and again into the wire buffer). A buffer gRPC
  // is done with comes back for a later chunk.
  struct Spares {
    absl::Mutex mu;
    std::vector<std::unique_ptr<std::string>> buffers ABSL_GUARDED_BY(mu);
  };
  auto spares = std::make_shared<Spares>();
  auto buffer_of = [&spares](const char* data, int64_t n) {
    std::unique_ptr<std::string> buffer;
    {
      absl::MutexLock lock(&spares->mu);
      if (!spares->buffers.empty()) {
        buffer = std::move(spares->buffers.back());
        spares->buffers.pop_back();
      }
    }
    if (!buffer) buffer = std::make_unique<std::string>();
    buffer->assign(data, size_t(n));
    return wire::SliceOwning(std::move(buffer), [spares](std::unique_ptr<std::string> b) {
      absl::MutexLock lock(&spares->mu);
      spares->buffers.push_back(std::move(b));
    });
  };
  grpc::ByteBuffer response;
  const grpc::internal::RpcMethod method(
      "/gpucompute.v1.Compute/Upload", grpc::internal::RpcMethod::CLIENT_STREAMING, core->channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(core->channel.get(), method,
                                                                    &context, &response));
  auto length_at = [&](int64_t at) { return std::min(chunk, *total - at); };
  auto message_at = [&](int64_t at) {
    wire::MessageWriter message;
    if (at == 0) {  // the first message: the shape, then data only
      message.VarintField(1, uint64_t(ToProto(matrix.dtype)));
      message.VarintField(2, uint64_t(matrix.rows));
      message.VarintField(3, uint64_t(matrix.cols));
      if (options.ttl_seconds != 0) message.VarintField(4, uint64_t(options.ttl_seconds));
    }
    message.SliceField(5, buffer_of(matrix.data + at, length_at(at)));
    return message.Finish();
  };
  // The next message is built (its chunk copied out of the matrix) while
  // this thread writes the current one: the synchronous API moves bytes
  // only while a thread is in Write, so building it here would stall the
  // network for as long as the copy takes.
  grpc::ByteBuffer current = message_at(0);  // at least one, even for an empty matrix
  for (int64_t at = 0;;) {
    const int64_t next_at = at + length_at(at);
    std::future<grpc::ByteBuffer> next;
    if (next_at < *total) {
      const bool large = length_at(next_at) >= internal::kHelperCopyBytes;
      next = internal::RunAside(large, [&message_at, next_at] { return message_at(next_at); });
    }
    if (!writer->Write(current) || !next.valid()) break;  // a failed stream: Finish says why
    current = next.get();
    at = next_at;
  }
  writer->WritesDone();
  if (absl::Status st = core->Finish("Upload", writer->Finish()); !st.ok()) return st;
  v1::TensorInfo info;
  if (!grpc::SerializationTraits<v1::TensorInfo>::Deserialize(&response, &info).ok() ||
      info.id().empty()) {
    return absl::InternalError("Upload failed: the server answered without a tensor id");
  }
  replicas_->Learn(info.server().empty() ? internal::InstanceOf(info.id()) : info.server(),
                   replica);
  return Tensor(core, std::move(info));
}

absl::StatusOr<Matrix> Client::Download(const std::string& id, int64_t chunk_bytes, bool release,
                                        v1::TensorInfo* info) const {
  return (*replicas_)[Route(id)].core->Download(id, chunk_bytes, release, info);
}

absl::Status Client::Download(const std::string& id, Matrix& into, int64_t chunk_bytes,
                              bool release, v1::TensorInfo* info) const {
  absl::StatusOr<Matrix> m =
      (*replicas_)[Route(id)].core->Download(id, chunk_bytes, release, info, into.ReleaseBytes());
  into = m.ok() ? std::move(*m) : Matrix();
  return m.status();
}

absl::StatusOr<v1::ReleaseTensorsResponse> Client::Release(
    const std::vector<std::string>& ids) const {
  if (replicas_->size() == 1) return core_->Release(ids);
  std::map<size_t, std::vector<std::string>> groups;  // by replica, in order
  for (const std::string& id : ids) groups[Route(id)].push_back(id);
  v1::ReleaseTensorsResponse total;
  for (const auto& [replica, group] : groups) {
    absl::StatusOr<v1::ReleaseTensorsResponse> r = (*replicas_)[replica].core->Release(group);
    if (!r.ok()) return r.status();
    total.set_released(total.released() + r->released());
    total.set_bytes_freed(total.bytes_freed() + r->bytes_freed());
  }
  return total;
}

absl::StatusOr<v1::ListTensorsResponse> Client::ListTensors() const {
  v1::ListTensorsResponse total;
  for (size_t i = 0; i < replicas_->size(); ++i) {
    const internal::ClientCore& core = *(*replicas_)[i].core;
    v1::ListTensorsResponse response;
    grpc::ClientContext context;
    core.Prepare(&context);
    if (absl::Status st = core.Finish(
            "ListTensors", core.stub->ListTensors(&context, v1::ListTensorsRequest(), &response));
        !st.ok()) {
      return st;
    }
    for (v1::TensorInfo& t : *response.mutable_tensors()) {
      replicas_->Learn(t.server(), i);
      *total.add_tensors() = std::move(t);
    }
    total.set_held_bytes(total.held_bytes() + response.held_bytes());
    total.set_limit_bytes(total.limit_bytes() + response.limit_bytes());
  }
  return total;
}

absl::StatusOr<v1::ProfileResponse> Client::Profile(const v1::ProfileRequest& request) const {
  v1::ProfileResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("Profile", stub_->Profile(&context, request, &response)); !st.ok()) {
    return st;
  }
  return response;
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo() const {
  v1::ServerInfo response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("GetServerInfo",
                               stub_->GetServerInfo(&context, v1::ServerInfoRequest(), &response));
      !st.ok()) {
    return st;
  }
  return response;
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& service) const {
  // Debian ships no generated grpc.health.v1 stubs, so the two one-field
  // messages are encoded by hand and sent through the generic stub.
  const std::string encoded = EncodeHealthCheckRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  Prepare(&context);
  const grpc::Status status = internal::UnaryOnThisThread(*(*replicas_)[0].generic_stubs.front(),
                                                          &context, "/grpc.health.v1.Health/Check",
                                                          request, &response, core_->busy_poll);
  if (absl::Status st = Finish("Health", status); !st.ok()) return st;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return absl::InternalError("Health failed: cannot read the HealthCheckResponse");
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return DecodeHealthCheckResponse(bytes);
}

}  // namespace gpucompute
