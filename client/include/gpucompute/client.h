// C++ client for the gpucompute service (proto/gpucompute/v1/compute.proto).
//
//   gpucompute::ClientOptions options;
//   options.target = "gpu-host:50051";
//   absl::StatusOr<gpucompute::Client> client = gpucompute::Client::Create(options);
//   absl::StatusOr<gpucompute::OpResult> c = client->MatMul(std::move(a), std::move(b));
//
//   // Matrices that stay on the server (README "Matrices that stay on the
//   // server"): upload once, chain ops on the server, download at the end.
//   absl::StatusOr<gpucompute::Tensor> a = client->Upload(matrix_a);
//   absl::StatusOr<gpucompute::OpResult> c =
//       client->MatMul(*a, *a, {.keep = true});          // c->tensor holds the result
//   absl::StatusOr<gpucompute::Matrix> host = c->tensor.Download();
//   // a and c->tensor are released when they go out of scope.
//
// Several replicas: set ClientOptions::targets; a call naming a tensor goes
// to the replica holding it (see ClientOptions::targets).
//
// One channel per Client (per replica); every method is const and safe to
// call from many threads at once. Errors keep the gRPC status code and read
// "<Method> failed: <CODE>: <server message>".
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gpucompute/matrix.h"
#include "gpucompute/shared_memory.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute {

// A dtype's wire number (through the dtype table) and back; `field` names
// the message field in the error for a number no dtype has.
inline v1::DType ToProto(DType dtype) {
  return static_cast<v1::DType>(kernels::Describe(dtype).proto_value);
}
absl::StatusOr<DType> DTypeFromProto(int dtype, absl::string_view field);
// "float16" for DTYPE_FLOAT16, "dtype 9" for a number no dtype has: for
// printing what a server said.
std::string ProtoDTypeText(int dtype);

// The port a target without one gets: the server's default.
inline constexpr int kDefaultPort = 50051;

// `target` with kDefaultPort added when it names a host without a port:
// "gpu-host" -> "gpu-host:50051", "dns:///gpu-host" -> "dns:///gpu-host:50051",
// "[::1]" -> "[::1]:50051". Targets with a port, unix: sockets and other
// schemes are returned as they are.
std::string WithDefaultPort(const std::string& target);

struct ClientOptions {
  // host:port, or any gRPC target URI (dns:///, unix:/path, ...).
  std::string target = "localhost:50051";
  // Several replicas of the service, each a target as above; when not empty
  // it replaces `target`. A tensor lives on the one replica that made it (its
  // id ends in "@<instance>", the server's --instance_name): a call naming a
  // tensor (a Tensor or Operand::TensorId operand, Download, Release, a
  // Tensor's own calls) goes to the replica whose GetServerInfo
  // instance_name is that instance (asked once per replica, when an id's
  // instance is not known yet; a target spelt as the instance needs no
  // asking), or, when none is, to the first replica, whose NOT_FOUND names
  // the holder. MatMul, Transpose, Reduce and Upload naming no tensor take
  // turns over the replicas; ListTensors asks them all; GetServerInfo,
  // Profile, Health and shared memory use the first. A single balanced
  // target (dns:/// with lb_policy "round_robin") reaches a different
  // replica from call to call, so no call can be routed through it: list the
  // replicas' addresses here instead (behind Kubernetes, the headless
  // Service's pod addresses, which the pods' --instance_name spells).
  std::vector<std::string> targets;
  // Deadline of each call; absl::InfiniteDuration() for none.
  absl::Duration deadline = absl::Seconds(120);

  // TLS is used when `use_tls` is set or any file below is given.
  bool use_tls = false;
  std::string tls_root_ca_file;  // PEM; empty: the system's roots
  std::string tls_cert_file;     // PEM client certificate, for mutual TLS
  std::string tls_key_file;      // its PEM private key; both or neither
  std::string tls_server_name;   // overrides the name checked in the server cert

  // Sent as "authorization: Bearer <token>" on every call. From a file, the
  // first line trimmed of surrounding whitespace, as the server reads its
  // --auth_token_file. At most one of the two.
  std::string bearer_token;
  std::string bearer_token_file;

  // gRPC's default is 4 MiB; protobuf messages cap at 2 GiB.
  int max_message_bytes = INT_MAX;

  // How calls spread over the addresses the target resolves to: "" or
  // "pick_first" (gRPC's default: one connection), or "round_robin" (with a
  // dns:/// target, a connection to every address and calls spread over the
  // ready ones: the way to use several GPU hosts or pods from one client).
  std::string lb_policy;

  // HTTP/2 frames, flow-control window and socket reads sized for
  // multi-MiB matrices (ApplyLargeMessageTransport); false: gRPC's defaults.
  bool large_message_transport = true;
  // Channels, each with its own TCP connection, that MatMul, Transpose and
  // Reduce calls take turns on. One HTTP/2 connection is read by one thread
  // at a time on each side (about 3 GB/s of payload on loopback), so
  // concurrent large requests from one process go faster over several; see
  // the load test's --connections. With 1, the channel shares its connection
  // with other channels of the process to the same target (gRPC's default).
  int connections = 1;
  // MatMul, Transpose, Reduce and Health wait for their answer by polling
  // instead of sleeping: a core stays busy for each call's duration, and the
  // call is faster by the wake-up of a sleeping thread (tens of
  // microseconds, more on a virtual machine after a long wait; see the
  // README's "Latency at one request in flight"). For latency-bound callers
  // with cores to spare.
  bool busy_poll = false;
};

// The channel arguments behind ClientOptions::large_message_transport; the
// server applies the same ones to its port.
void ApplyLargeMessageTransport(grpc::ChannelArguments* args);

namespace internal {
struct ClientCore;  // the channel and call settings a Client and its Tensors share
}  // namespace internal

// A matrix held by the server (Upload, or a result kept with `keep`), named
// by its id. Owning: the destructor releases it on the server (best effort,
// errors ignored) unless it was moved from, released or detached. It keeps
// the channel alive, so it may outlive the Client that made it. Not
// thread-safe for concurrent Release/Detach; Download may run concurrently.
class Tensor {
 public:
  Tensor() = default;  // empty: names nothing
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

  // Whether it names a tensor (false once moved from, released or detached).
  explicit operator bool() const { return !info_.id().empty(); }
  const std::string& id() const { return info_.id(); }
  // As the server described it (Upload's answer); a kept result knows its
  // id, dtype, rows, cols and bytes only (ListTensors has the rest).
  const v1::TensorInfo& info() const { return info_; }
  DType dtype() const { return dtype_; }
  int64_t rows() const { return info_.rows(); }
  int64_t cols() const { return info_.cols(); }

  // The matrix's bytes, streamed down in messages of `chunk_bytes` (0:
  // kDownloadChunkBytes). Renews the tensor's idle lifetime.
  absl::StatusOr<Matrix> Download(int64_t chunk_bytes = 0) const;
  // Releases it now; afterwards the handle is empty. NOT_FOUND when the
  // server no longer held it (expired); the handle is emptied either way.
  absl::Status Release();
  // Gives up ownership: the tensor stays on the server until released by id
  // or expired. Returns the id; the handle is empty afterwards.
  std::string Detach();

 private:
  friend class Client;
  // `dtype` is info.dtype() as this client knows it: the dtype it sent, or
  // one the answer's parser has checked.
  Tensor(std::shared_ptr<const internal::ClientCore> core, v1::TensorInfo info, DType dtype)
      : core_(std::move(core)), info_(std::move(info)), dtype_(dtype) {}
  std::shared_ptr<const internal::ClientCore> core_;
  v1::TensorInfo info_;
  DType dtype_ = DType::kFloat32;
};

// An operand of MatMul, Transpose or Reduce: a host matrix sent inline, or a
// tensor held by the server, named by id (no matrix bytes move). Converts
// implicitly from a Matrix (moved in with std::move, else copied) and from a
// Tensor (which must outlive the call).
class Operand {
 public:
  Operand(Matrix matrix) : matrix_(std::move(matrix)) {}  // NOLINT: implicit by design
  Operand(const Tensor& tensor)                           // NOLINT: implicit by design
      : tensor_id_(tensor.id()),
        tensor_dtype_(tensor.info().dtype()),
        tensor_rows_(tensor.rows()),
        tensor_cols_(tensor.cols()) {}
  // A matrix in a registered shared-memory region: no bytes are sent.
  Operand(const SharedMemoryView& view)  // NOLINT: implicit by design
      : tensor_dtype_(ToProto(view.dtype)),
        tensor_rows_(view.rows),
        tensor_cols_(view.cols),
        shm_region_(view.region),
        shm_offset_(view.offset),
        shm_bytes_(view.byte_size()) {}
  // A tensor named by its id alone (e.g. from the CLI's @ID): the server
  // fills in its dtype and shape.
  static Operand TensorId(std::string id);

  bool is_tensor() const { return !tensor_id_.empty(); }
  bool is_shared_memory() const { return !shm_region_.empty(); }
  const std::string& tensor_id() const { return tensor_id_; }
  Matrix& matrix() { return matrix_; }  // inline operands
  const Matrix& matrix() const { return matrix_; }
  // Inline bytes this operand adds to a request (0 for a tensor or a
  // shared-memory view).
  int64_t inline_bytes() const {
    return is_tensor() || is_shared_memory() ? 0 : matrix_.byte_size();
  }
  // "512x256 float32", "tensor <id>", or, for a shared-memory view,
  // '37x23 float32 in shared memory "name" at offset 64'.
  std::string Describe() const;

 private:
  friend class Client;
  Operand() = default;
  Matrix matrix_;
  std::string tensor_id_;
  // A tensor's or a shared-memory view's dtype and shape (0: the tensor's own).
  v1::DType tensor_dtype_ = v1::DTYPE_UNSPECIFIED;
  int64_t tensor_rows_ = 0, tensor_cols_ = 0;
  std::string shm_region_;
  int64_t shm_offset_ = 0, shm_bytes_ = 0;
};

// A result: the matrix with the server's timing of the request, or, when
// the call asked to keep it, the Tensor holding it on the server, or, when
// it asked for a shared-memory output, nothing but the report (the result
// is in the view). `output` is 0 x 0 in the last two cases.
struct OpResult {
  Matrix output;
  v1::ExecutionReport report;
  Tensor tensor;                  // set when kept (options.keep)
  bool in_shared_memory = false;  // written to options.output
  bool kept() const { return static_cast<bool>(tensor); }
};

struct MatMulOptions {
  std::string variant;      // "" or "auto": the server chooses
  bool allow_tf32 = false;  // let "auto" pick reduced-precision variants
  // The result's dtype: unset, the inputs'; kFloat32 for 16-bit inputs gives
  // the float32 accumulation unrounded.
  std::optional<DType> output_dtype = std::nullopt;
  bool keep = false;        // hold the result on the server: OpResult::tensor
  int64_t ttl_seconds = 0;  // keep: its idle lifetime; 0: the server's default
  // Write the result into this shared-memory view (its dtype and shape
  // must be the result's) instead of returning it. The server checks the
  // byte size; a view of the right size but another shape (29x37 for a
  // 37x29 result) is INVALID_ARGUMENT after the call, the bytes written.
  std::optional<SharedMemoryView> output = std::nullopt;
};

// Transpose and Reduce options beyond the variant.
struct OpOptions {
  std::string variant;  // "" or "auto": the server chooses
  // Reduce only, as in MatMulOptions (a transpose keeps its input's dtype).
  std::optional<DType> output_dtype = std::nullopt;
  bool keep = false;        // hold the result on the server: OpResult::tensor
  int64_t ttl_seconds = 0;  // keep: its idle lifetime; 0: the server's default
  std::optional<SharedMemoryView> output = std::nullopt;  // as in MatMulOptions
};

// A matrix's bytes as Upload reads them, without owning them: from a Matrix
// (implicitly) or from any memory of rows * cols elements.
struct MatrixView {
  MatrixView(const Matrix& m)  // NOLINT: implicit by design
      : dtype(m.dtype()), rows(m.rows()), cols(m.cols()), data(m.bytes().data()) {}
  MatrixView(DType dtype, int64_t rows, int64_t cols, const void* data)
      : dtype(dtype), rows(rows), cols(cols), data(static_cast<const char*>(data)) {}
  DType dtype;
  int64_t rows, cols;
  const char* data;  // rows * cols elements, row-major, little-endian
};

// Download's data bytes per message when a call says 0: larger than the
// server's own default (just under 4 MiB, for clients with gRPC's default
// receive limit), since this client receives messages of any size, and each
// message costs a round of the stream's flow: 32 MiB moved a 256 MiB tensor
// 20-30% faster than 4 MiB on loopback.
inline constexpr int64_t kDownloadChunkBytes = int64_t{32} << 20;

struct UploadOptions {
  int64_t ttl_seconds = 0;        // idle lifetime; 0: the server's default (--tensor_ttl)
  int64_t chunk_bytes = 4 << 20;  // data bytes per stream message (> 0)
};

// grpc.health.v1 HealthCheckResponse.ServingStatus.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* HealthStatusName(HealthStatus status);

namespace internal {
struct Replicas;  // the targets of a Client and which instance each serves
}  // namespace internal

class Client {
 public:
  // Reads the TLS and token files and creates the channel(s). Connecting is
  // lazy: an unreachable server shows up as UNAVAILABLE on the first call.
  static absl::StatusOr<Client> Create(const ClientOptions& options);

  Client(Client&&) noexcept;
  Client& operator=(Client&&) noexcept;
  ~Client();

  // Inputs are taken by value: pass std::move(m) to hand the bytes to the
  // request without a copy, or an lvalue to copy them once. The result is
  // copied once out of the received message. A process sending large
  // matrices repeatedly should call RetainLargeHostAllocations()
  // (host_memory.h) at start-up, or every result pays fresh page faults.
  // Each operand is a Matrix or a Tensor (Operand); with options.keep the
  // result stays on the server as OpResult::tensor.
  absl::StatusOr<OpResult> MatMul(Operand a, Operand b, const MatMulOptions& options = {}) const;
  absl::StatusOr<OpResult> Transpose(Operand input, const std::string& variant = "") const;
  absl::StatusOr<OpResult> Transpose(Operand input, const OpOptions& options) const;
  absl::StatusOr<OpResult> Reduce(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                  const std::string& variant = "") const;
  absl::StatusOr<OpResult> Reduce(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                  const OpOptions& options) const;

  // Tensors (README "Matrices that stay on the server"). Upload streams the
  // matrix in messages of options.chunk_bytes: any size the server's tensor
  // budget admits, no 2 GiB message limit.
  absl::StatusOr<Tensor> Upload(MatrixView matrix, const UploadOptions& options = {}) const;
  // Upload of a matrix already in a registered region: one message naming
  // the slice; the server copies it (by DMA on a GPU).
  absl::StatusOr<Tensor> Upload(const SharedMemoryView& view,
                                const UploadOptions& options = {}) const;
  // Download into a registered region's view (its dtype and shape must be
  // the tensor's): no bytes on the socket. The server checks the byte size;
  // a view of the right size but another shape is INVALID_ARGUMENT after
  // the bytes were written.
  absl::Status Download(const std::string& id, const SharedMemoryView& into,
                        bool release = false) const;
  // The matrix of tensor `id` (not owned: e.g. an id from the CLI), in
  // messages of `chunk_bytes` (0: kDownloadChunkBytes); `release` releases
  // it once sent. `info`, when given, receives its TensorInfo.
  absl::StatusOr<Matrix> Download(const std::string& id, int64_t chunk_bytes = 0,
                                  bool release = false, v1::TensorInfo* info = nullptr) const;
  // The same into `into`, whose storage is written in place when it already
  // has the tensor's byte size: downloading again into the same matrix
  // allocates nothing and takes no page faults (a fresh 256 MiB matrix costs
  // the client about a third of its time in first-touch faults). On failure
  // `into` is left empty.
  absl::Status Download(const std::string& id, Matrix& into, int64_t chunk_bytes = 0,
                        bool release = false, v1::TensorInfo* info = nullptr) const;
  // Releases tensors by id, each on the replica holding it; ids the server
  // does not hold are skipped (`released` counts the others).
  absl::StatusOr<v1::ReleaseTensorsResponse> Release(const std::vector<std::string>& ids) const;
  // Every replica's tensors, held_bytes and limit_bytes summed.
  absl::StatusOr<v1::ListTensorsResponse> ListTensors() const;
  // Shared memory (see SharedMemoryRegion, which calls these for you).
  absl::StatusOr<v1::SharedMemoryRegion> RegisterSharedMemory(
      const v1::RegisterSharedMemoryRequest& request) const;
  absl::StatusOr<int64_t> UnregisterSharedMemory(const std::string& name) const;
  absl::StatusOr<v1::ListSharedMemoryResponse> ListSharedMemory() const;
  absl::StatusOr<v1::ProfileResponse> Profile(const v1::ProfileRequest& request) const;
  absl::StatusOr<v1::ServerInfo> GetServerInfo() const;
  // A round trip that does no work: sends `payload_bytes` bytes and gets
  // `response_bytes` zero bytes back (what the network and gRPC cost for
  // a call's bytes). Returns the payload size received; a negative
  // `payload_bytes` is INVALID_ARGUMENT, sent nowhere.
  absl::StatusOr<int64_t> Echo(int64_t response_bytes, int64_t payload_bytes = 0) const;
  // grpc.health.v1.Health/Check; `service` "" asks about the whole server.
  absl::StatusOr<HealthStatus> Health(const std::string& service = "") const;

  // The first replica's target; targets(): all of them, in the order given.
  const std::string& target() const { return target_; }
  const std::vector<std::string>& targets() const { return targets_; }
  // The first replica's channels (its ClientOptions::connections channels).
  const std::shared_ptr<grpc::Channel>& channel() const { return channels_.front(); }
  // All ClientOptions::connections channels, channel() first.
  const std::vector<std::shared_ptr<grpc::Channel>>& channels() const { return channels_; }
  // "Bearer <token>" or empty: the metadata to send with calls made directly
  // on channel() (the load test's generic calls).
  const std::string& authorization() const { return authorization_; }

 private:
  friend class SharedMemoryRegion;
  Client() = default;
  absl::Status Finish(const char* method, const grpc::Status& status) const;
  // MatMul, Transpose and Reduce as raw messages: payloads are sent from the
  // caller's matrices and read from the received slices (see proto/wire).
  // `into`: the shared-memory output the request names, if any.
  absl::StatusOr<OpResult> ComputeCall(const char* method, grpc::ByteBuffer request,
                                       const char* field,
                                       const std::optional<SharedMemoryView>& into,
                                       size_t replica) const;
  absl::StatusOr<OpResult> TransposeCall(Operand input, const OpOptions& options) const;
  absl::StatusOr<OpResult> ReduceCall(Operand input, v1::ReduceOp op, v1::ReduceAxis axis,
                                      const OpOptions& options) const;
  void Prepare(grpc::ClientContext* context) const;
  // The replica of a call: the one holding `tensor_id` when not empty, else
  // the first when `shared_memory` (regions are registered there), else the
  // next in turn.
  size_t Route(const std::string& tensor_id, bool shared_memory = false) const;

  std::string target_;
  std::vector<std::string> targets_;
  absl::Duration deadline_;
  std::string authorization_;  // "Bearer <token>", or empty
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::unique_ptr<v1::Compute::Stub> stub_;  // on the first replica's first channel
  int max_message_bytes_ = INT_MAX;
  std::shared_ptr<const internal::ClientCore> core_;  // what Tensors keep (first replica)
  std::shared_ptr<internal::Replicas> replicas_;      // every replica, core_'s first
};

// Moving between Matrix and the wire message without copying the bytes.
void MoveToProto(Matrix&& matrix, v1::Matrix* out);
// Validates dtype and length; `field` names the message field in errors.
absl::StatusOr<Matrix> MoveFromProto(v1::Matrix* matrix, const std::string& field);

// Names as the CLI and reports spell them: "sum", "per_row", "matmul".
const char* ReduceOpName(v1::ReduceOp op);
const char* ReduceAxisName(v1::ReduceAxis axis);
const char* OpName(v1::Op op);
// Those names read back; INVALID_ARGUMENT "expected sum, min, max or mean,
// got 'median'" otherwise (callers prefix the flag).
absl::StatusOr<v1::ReduceOp> ParseReduceOp(absl::string_view name);
absl::StatusOr<v1::ReduceAxis> ParseReduceAxis(absl::string_view name);
absl::StatusOr<v1::Op> ParseOp(absl::string_view name);

// An operation's shape as ProfileRequest holds it. MatMul: a is m x k, b is
// k x n. Transpose and Reduce: the input is m x n (k unused).
struct OpShape {
  int64_t m = 0, n = 0, k = 0;
};
// How people type a shape, everywhere (CLI, load test, Python): "MxKxN" for
// matmul, in the order of a @ b (a is M x K, b is K x N, the result M x N),
// and "MxN" otherwise.
const char* ShapeSyntax(v1::Op op);
// Parses "512x256x128" (or "512X256X128"); INVALID_ARGUMENT naming the
// syntax and the text otherwise (callers prefix the flag).
absl::StatusOr<OpShape> ParseShape(v1::Op op, absl::string_view text);
// The inverse: "512x256x128" for matmul, "4096x4096" otherwise.
std::string ShapeText(v1::Op op, const OpShape& shape);

}  // namespace gpucompute
