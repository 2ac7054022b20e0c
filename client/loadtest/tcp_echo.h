// The transport ceiling for --baseline=tcp: a loopback TCP server (or, when
// the load test's target is a unix socket, a unix socket server, so that the
// baseline crosses the same kind of socket as the calls) that reads a whole
// request (like a unary RPC, store and forward) and writes back a response
// of the requested size. Wire: two little-endian int64 (request and response
// byte counts), then the request bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace gpucompute::loadtest {

// Blocking loops over recv/send until `size` bytes moved; false on EOF or error.
bool ReadFull(int fd, char* data, int64_t size);
bool WriteFull(int fd, const char* data, int64_t size);

enum class EchoTransport { kTcp, kUnix };

// Whether a gRPC target is a unix socket (unix:, unix-abstract:).
bool IsUnixTarget(const std::string& target);

// A new directory only this user may enter, under $TMPDIR (or /tmp), for an
// echo server's socket: no other process can take or connect to its path.
absl::StatusOr<std::string> MakePrivateSocketDir();

class TcpEchoServer {
 public:
  // kTcp: listens on 127.0.0.1 at a free port. kUnix: on a socket in a new
  // private temporary directory, removed with the server.
  static absl::StatusOr<std::unique_ptr<TcpEchoServer>> Start(
      EchoTransport transport = EchoTransport::kTcp);
  ~TcpEchoServer();

  EchoTransport transport() const { return transport_; }
  int port() const { return port_; }                 // kTcp
  const std::string& path() const { return path_; }  // kUnix
  // A new connection to the server (TCP_NODELAY on TCP); -1 on failure.
  int Connect() const;

 private:
  TcpEchoServer() = default;
  void Accept();
  static void Serve(int fd);

  EchoTransport transport_ = EchoTransport::kTcp;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string dir_, path_;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> connections_;
};

}  // namespace gpucompute::loadtest
