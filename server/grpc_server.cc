// Building and starting the gRPC server (grpc_server.h).
#include "server/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

constexpr char kServiceName[] = "gpucompute.v1.Compute";

// A request carries at most two matrices (MatMul's a and b) plus a little
// framing; refusing larger messages in the transport stops a client from
// making the server buffer gigabytes it would reject anyway.
int MaxReceiveMessageBytes(int64_t max_matrix_bytes) {
  const int64_t limit = 2 * max_matrix_bytes + (int64_t{1} << 20);
  return static_cast<int>(std::min<int64_t>(limit, std::numeric_limits<int>::max()));
}

}  // namespace

absl::Status PrepareListeners(const ServingOptions& serving) {
  for (const Listener& l : serving.listeners) {
    if (l.kind != Listener::Kind::kUnix) continue;
    if (absl::Status s = ClearStaleSocket(l); !s.ok()) return s;
  }
  if (serving.socket_mode) {
    for (const Listener& l : serving.listeners) {
      if (l.kind == Listener::Kind::kUnixAbstract) {
        LogWarning(absl::StrCat("--unix_socket_mode does not apply to ", l.address,
                                ": an abstract socket has no file, any local process may "
                                "connect to it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(ServingOptions& serving,
                                                              int64_t max_matrix_bytes,
                                                              ComputeService& service,
                                                              ComputeQueues* queues) {
  std::vector<Listener>& listeners = serving.listeners;
  const std::optional<mode_t>& socket_mode = serving.socket_mode;
  // The port opens before the devices do, answering health checks with
  // NOT_SERVING (and Compute calls with UNAVAILABLE) until they are ready.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  for (Listener& l : listeners)
    builder.AddListeningPort(l.address, serving.security.credentials, &l.port);
  // A second server on the same port must fail to start, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyTransportOptions(builder, serving.connection_limits);
  builder.SetMaxReceiveMessageSize(MaxReceiveMessageBytes(max_matrix_bytes));
  if (serving.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, serving.max_concurrent_streams);
  }
  builder.RegisterService(&service);
  if (queues != nullptr) queues->AddTo(builder);
  // With --unix_socket_mode, sockets are created owner-only (umask 0177)
  // until chmod gives them that mode: never wider than asked, even briefly.
  const mode_t old_umask = socket_mode ? umask(0177) : 0;
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (socket_mode) umask(old_umask);
  std::vector<std::string> unbound;
  for (const Listener& l : listeners) {
    if (l.port == 0) unbound.push_back(l.address);
  }
  if (!server && unbound.empty()) {
    for (const Listener& l : listeners) unbound.push_back(l.address);
  }
  if (!unbound.empty()) {
    if (server) server->Shutdown();
    (void)SetUpSocketFiles(listeners, std::nullopt);  // the sockets that did bind go
    RemoveSocketFiles(listeners);
    return absl::UnavailableError(absl::StrCat(
        "--listen: cannot listen on ", absl::StrJoin(unbound, ", "),
        " (the address is taken, or not one of this host's; gRPC's line above says which)"));
  }
  if (absl::Status s = SetUpSocketFiles(listeners, socket_mode); !s.ok()) {
    server->Shutdown();
    RemoveSocketFiles(listeners);
    return s;
  }
  std::vector<std::string> bound;
  for (const Listener& l : listeners) {
    std::string& text = bound.emplace_back(l.Bound());
    if (l.kind == Listener::Kind::kUnix && socket_mode) {
      absl::StrAppend(&text, " (mode ", absl::StrFormat("%04o", *socket_mode), ")");
    }
  }
  if (queues != nullptr) queues->Start();
  // The default health service starts out SERVING for ""; correct it at once.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  LogInfo(absl::StrCat("gRPC on ", absl::StrJoin(bound, ", "), " (", serving.security.description,
                       serving.auth ? ", bearer token" : "", "): NOT_SERVING while devices open"));
  return server;
}

void MarkServing(grpc::Server& server) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  health->SetServingStatus(kServiceName, true);
  health->SetServingStatus(true);
}

}  // namespace gpucompute::server
