// The in-process echo servers of the baselines (echo_baselines.h).
#include "loadtest/echo_baselines.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loadtest/report.h"

namespace gpucompute::loadtest {
namespace {

absl::Status StartTcpEcho(bool unix_target, EchoBaselines& echoes) {
  auto started = TcpEchoServer::Start(unix_target ? EchoTransport::kUnix : EchoTransport::kTcp);
  if (!started.ok()) return started.status();
  echoes.tcp = std::move(*started);
  if (unix_target) {
    std::printf(
        "baseline: the target is a unix socket, so the echo (row %s) runs over a unix "
        "socket, not TCP; xTCP compares with it\n",
        kUnixEcho);
  }
  return absl::OkStatus();
}

// One client to the echo at `echo_options`' target per --connections value,
// as for the server.
absl::Status ConnectEcho(const RunOptions& run, ClientOptions echo_options, EchoBaselines& echoes) {
  for (int n : run.connections) {
    echo_options.connections = n;
    auto created = Client::Create(echo_options);
    if (!created.ok()) return created.status();
    echoes.grpc_clients.emplace(n, std::move(*created));
  }
  return absl::OkStatus();
}

// --echo_at=server: the server's Echo rpc with the op's request as its
// payload, asking for as many bytes as the op's response, over connections
// of its own to the target (one client per --connections value).
absl::Status StartServerEcho(const RunOptions& run, const ClientOptions& options,
                             const PreparedCall& op_call, const grpc::ByteBuffer& response,
                             const std::string& variant, EchoBaselines& echoes) {
  const int64_t response_bytes = int64_t(response.Length());
  echoes.grpc_call.emplace(PreparedCall::ServerEcho(op_call, response_bytes));
  if (absl::Status st = ConnectEcho(run, options, echoes); !st.ok()) return st;
  std::printf(
      "baseline: row %s sends the server's Echo rpc %s's request as its payload (%zu bytes, "
      "variant %s, inline) and asks for %lld zero bytes back, as many as the op's response: "
      "the same bytes through the server's gRPC with no work behind them; xEcho compares "
      "inline rows' req/s with it\n",
      kGrpcEcho, OpName(run.workload.op), echoes.grpc_call->request().Length(), variant.c_str(),
      static_cast<long long>(response_bytes));
  return absl::OkStatus();
}

// The first variant's inline call, sent once to the server, whose response
// the echo server then returns to every call; one client to the echo per
// --connections value, as for the server.
absl::Status StartGrpcEcho(const RunOptions& run, const ClientOptions& options,
                           const Client& client, const CallSettings& call_settings,
                           const std::string& variant, EchoBaselines& echoes) {
  const Workload& w = run.workload;
  auto op_call = PreparedCall::Create(w, variant == "auto" ? "" : variant);
  if (!op_call.ok()) return op_call.status();
  auto response = CallOnce(client.channels().front(), *op_call, call_settings);
  if (!response.ok()) {
    return absl::Status(
        response.status().code(),
        absl::StrCat("--baseline=echo: the call whose response the echo sends back: ",
                     response.status().message()));
  }
  if (run.baselines.echo_at_server) {
    return StartServerEcho(run, options, *op_call, *response, variant, echoes);
  }
  auto started = GrpcEchoServer::Start(
      IsUnixTarget(options.target) ? EchoTransport::kUnix : EchoTransport::kTcp, *response,
      run.baselines.echo_queues);
  if (!started.ok()) return started.status();
  echoes.grpc = std::move(*started);
  echoes.grpc_call.emplace(PreparedCall::Echo(*op_call));
  ClientOptions echo_options;
  echo_options.target = echoes.grpc->target();
  echo_options.large_message_transport = options.large_message_transport;
  if (absl::Status st = ConnectEcho(run, echo_options, echoes); !st.ok()) return st;
  std::printf(
      "baseline: row %s sends %s's request (%zu bytes, variant %s, inline) to a gRPC server "
      "in this process on %s that answers with its response as the server encoded it (%zu "
      "bytes) and does nothing else, %s; xEcho compares inline rows' req/s with it\n",
      kGrpcEcho, OpName(w.op), op_call->request().Length(), variant.c_str(),
      echoes.grpc->target().c_str(), response->Length(),
      run.baselines.echo_queues > 0 ? absl::StrCat("served on ", run.baselines.echo_queues,
                                                   " completion queues (--echo_grpc_queues)")
                                          .c_str()
                                    : "served on gRPC's callback threads");
  return absl::OkStatus();
}

}  // namespace

absl::Status StartEchoBaselines(const RunOptions& run, const ClientOptions& options,
                                const Client& client, const CallSettings& call_settings,
                                const std::string& variant, EchoBaselines& echoes) {
  if (run.baselines.tcp) {
    if (absl::Status st = StartTcpEcho(IsUnixTarget(options.target), echoes); !st.ok()) return st;
  }
  if (run.baselines.echo) {
    return StartGrpcEcho(run, options, client, call_settings, variant, echoes);
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::loadtest
