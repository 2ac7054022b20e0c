// The echo servers the socket and gRPC echo baselines measure against, both
// in this process: --baseline=tcp's socket echo, and --baseline=echo's gRPC
// server answering the op's own response with the clients that call it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "gpucompute/client.h"
#include "loadtest/grpc_echo.h"
#include "loadtest/load.h"
#include "loadtest/run_options.h"
#include "loadtest/tcp_echo.h"

namespace gpucompute::loadtest {

struct EchoBaselines {
  std::unique_ptr<TcpEchoServer> tcp;     // --baseline=tcp
  std::optional<PreparedCall> grpc_call;  // --baseline=echo: the call sent to `grpc`
  std::unique_ptr<GrpcEchoServer> grpc;   // --baseline=echo
  std::map<int, Client> grpc_clients;     // of `grpc`, by --connections value
};

// Starts the echoes `run` asks for and prints what they stand for. Against a
// unix-socket `options.target` they use unix sockets too. --baseline=echo
// sends `variant`'s inline call once through `client` for the response the
// echo then returns.
absl::Status StartEchoBaselines(const RunOptions& run, const ClientOptions& options,
                                const Client& client, const CallSettings& call_settings,
                                const std::string& variant, EchoBaselines& echoes);

}  // namespace gpucompute::loadtest
