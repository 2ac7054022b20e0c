// The transport ceiling for --baseline=tcp: a loopback TCP server that reads
// a whole request (like a unary RPC, store and forward) and writes back a
// response of the requested size. Wire: two little-endian int64 (request and
// response byte counts), then the request bytes.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace gpucompute::loadtest {

// Blocking loops over recv/send until `size` bytes moved; false on EOF or error.
bool ReadFull(int fd, char* data, int64_t size);
bool WriteFull(int fd, const char* data, int64_t size);

class TcpEchoServer {
 public:
  // Listens on 127.0.0.1 at a free port.
  static absl::StatusOr<std::unique_ptr<TcpEchoServer>> Start();
  ~TcpEchoServer();

  int port() const { return port_; }

 private:
  TcpEchoServer() = default;
  void Accept();
  static void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> connections_;
};

}  // namespace gpucompute::loadtest
