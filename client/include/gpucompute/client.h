// C++ client for the gpucompute service (proto/gpucompute/v1/compute.proto).
//
//   gpucompute::ClientOptions options;
//   options.target = "gpu-host:50051";
//   absl::StatusOr<gpucompute::Client> client = gpucompute::Client::Create(options);
//   absl::StatusOr<gpucompute::OpResult> c = client->MatMul(std::move(a), std::move(b));
//
// One channel per Client; every method is const and safe to call from many
// threads at once. Errors keep the gRPC status code and read
// "<Method> failed: <CODE>: <server message>".
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
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
#include "gpucompute/v1/compute.grpc.pb.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute {

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
};

// The channel arguments behind ClientOptions::large_message_transport; the
// server applies the same ones to its port.
void ApplyLargeMessageTransport(grpc::ChannelArguments* args);

// A result matrix with the server's timing of the request.
struct OpResult {
  Matrix output;
  v1::ExecutionReport report;
};

struct MatMulOptions {
  std::string variant;      // "" or "auto": the server chooses
  bool allow_tf32 = false;  // let "auto" pick reduced-precision variants
};

// grpc.health.v1 HealthCheckResponse.ServingStatus.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* HealthStatusName(HealthStatus status);

class Client {
 public:
  // Reads the TLS and token files and creates the channel. Connecting is
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
  absl::StatusOr<OpResult> MatMul(Matrix a, Matrix b, const MatMulOptions& options = {}) const;
  absl::StatusOr<OpResult> Transpose(Matrix input, const std::string& variant = "") const;
  absl::StatusOr<OpResult> Reduce(Matrix input, v1::ReduceOp op, v1::ReduceAxis axis,
                                  const std::string& variant = "") const;
  absl::StatusOr<v1::ProfileResponse> Profile(const v1::ProfileRequest& request) const;
  absl::StatusOr<v1::ServerInfo> GetServerInfo() const;
  // grpc.health.v1.Health/Check; `service` "" asks about the whole server.
  absl::StatusOr<HealthStatus> Health(const std::string& service = "") const;

  const std::string& target() const { return target_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channels_.front(); }
  // All ClientOptions::connections channels, channel() first.
  const std::vector<std::shared_ptr<grpc::Channel>>& channels() const { return channels_; }
  // "Bearer <token>" or empty: the metadata to send with calls made directly
  // on channel() (the load test's generic calls).
  const std::string& authorization() const { return authorization_; }

 private:
  Client() = default;
  absl::Status Finish(const char* method, const grpc::Status& status) const;
  // MatMul, Transpose and Reduce as raw messages: payloads are sent from the
  // caller's matrices and read from the received slices (see proto/wire).
  absl::StatusOr<OpResult> ComputeCall(const char* method, grpc::ByteBuffer request,
                                       const char* field) const;
  void Prepare(grpc::ClientContext* context) const;

  std::string target_;
  absl::Duration deadline_;
  std::string authorization_;  // "Bearer <token>", or empty
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::unique_ptr<v1::Compute::Stub> stub_;                        // on the first channel
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_stubs_;  // one per channel
  std::unique_ptr<std::atomic<uint64_t>> next_channel_;            // compute calls take turns
  int max_message_bytes_ = INT_MAX;
};

// Moving between Matrix and the wire message without copying the bytes.
v1::DType ToProto(DType dtype);
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
