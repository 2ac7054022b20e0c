// The payload-matched floor for --baseline=echo: a gRPC server in the load
// test's own process that answers MatMul, Transpose and Reduce with one
// canned response and does nothing else, so that a compute row can be set
// against gRPC carrying its very bytes (its encoded request in, its encoded
// response out) rather than against a health Check of zero bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/server.h>
#include <grpcpp/support/byte_buffer.h>
#include "absl/status/statusor.h"
#include "loadtest/tcp_echo.h"

namespace gpucompute::loadtest {

class GrpcEchoServer {
 public:
  // Every call is answered with `response` (a copy kept for the server's
  // life; each answer references it, no byte is copied per call). kTcp:
  // listens on 127.0.0.1 at a free port; kUnix: on a socket in a new
  // private temporary directory, removed with the server. Plaintext, with
  // the gpucompute server's transport settings for large messages. `queues`
  // > 0 serves the calls as the server's --grpc_queues does, on that many
  // completion queues; 0 as its callback threads do.
  static absl::StatusOr<std::unique_ptr<GrpcEchoServer>> Start(EchoTransport transport,
                                                               const grpc::ByteBuffer& response,
                                                               int queues);
  ~GrpcEchoServer();

  // The gRPC target of the server: "127.0.0.1:PORT" or "unix:PATH".
  const std::string& target() const { return target_; }
  // Calls answered so far, and the request and response message bytes they
  // carried in total.
  int64_t calls() const { return calls_.load(); }
  int64_t request_bytes() const { return request_bytes_.load(); }
  int64_t response_bytes() const { return response_bytes_.load(); }

 private:
  class Service;
  class QueueService;
  GrpcEchoServer() = default;
  // One call answered, with the message bytes it carried.
  void Count(int64_t request_bytes, int64_t response_bytes);

  std::string dir_, target_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<QueueService> queue_service_;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<int64_t> calls_{0}, request_bytes_{0}, response_bytes_{0};
};

}  // namespace gpucompute::loadtest
