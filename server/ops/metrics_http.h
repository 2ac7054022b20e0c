// A minimal HTTP/1.1 server for the Prometheus scrape: GET /metrics answers
// with the text a callback renders, anything else gets 404. Hand-written
// rather than prometheus-cpp's civetweb Exposer: civetweb starts its threads
// with a fixed 100 KiB stack, which cannot hold the static thread-local
// storage cuBLAS brings into the process, so the Exposer fails to start in
// a CUDA build.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace gpucompute::server {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  // Listens on `address` (host:port; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  Render render);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer(int listen_fd, int wake_fd[2], int port, Render render);
  void AcceptLoop();
  void Answer(int fd) const;

  const int listen_fd_;
  const int wake_read_fd_, wake_write_fd_;  // a byte here stops the loop
  const int port_;
  const Render render_;
  std::thread thread_;
};

}  // namespace gpucompute::server
