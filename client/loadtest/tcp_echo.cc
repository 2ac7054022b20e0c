#include "loadtest/tcp_echo.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace gpucompute::loadtest {

bool ReadFull(int fd, char* data, int64_t size) {
  while (size > 0) {
    ssize_t n = recv(fd, data, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= n;
  }
  return true;
}

bool WriteFull(int fd, const char* data, int64_t size) {
  while (size > 0) {
    ssize_t n = send(fd, data, static_cast<size_t>(std::min<int64_t>(size, 1 << 30)), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= n;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<TcpEchoServer>> TcpEchoServer::Start() {
  std::unique_ptr<TcpEchoServer> server(new TcpEchoServer);
  server->listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
  if (server->listen_fd_ < 0) {
    return absl::InternalError(absl::StrCat("TCP baseline: socket: ", std::strerror(errno)));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(server->listen_fd_, 128) != 0 ||
      getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return absl::InternalError(absl::StrCat("TCP baseline: listen: ", std::strerror(errno)));
  }
  server->port_ = ntohs(addr.sin_port);
  server->acceptor_ = std::thread([s = server.get()] { s->Accept(); });
  return server;
}

TcpEchoServer::~TcpEchoServer() {
  shutdown(listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  close(listen_fd_);
  // Connections end when their clients close them.
  for (std::thread& t : connections_) t.join();
}

void TcpEchoServer::Accept() {
  while (true) {
    int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard<std::mutex> lock(mu_);
    connections_.emplace_back([fd] { Serve(fd); });
  }
}

void TcpEchoServer::Serve(int fd) {
  std::string request;
  int64_t header[2];
  while (ReadFull(fd, reinterpret_cast<char*>(header), sizeof header)) {
    if (header[0] < 0 || header[1] < 0 || header[0] + header[1] == 0) break;
    // A request of no bytes (the download rows' baseline) is answered from
    // a buffer of the response's size.
    request.resize(static_cast<size_t>(header[0] > 0 ? header[0] : header[1]));
    if (!ReadFull(fd, request.data(), header[0])) break;
    const int64_t piece = static_cast<int64_t>(request.size());
    // Send the request's own bytes back (repeated when the response is
    // larger): no copy, as the ceiling should be.
    bool ok = true;
    for (int64_t left = header[1]; ok && left > 0; left -= std::min(left, piece)) {
      ok = WriteFull(fd, request.data(), std::min(left, piece));
    }
    if (!ok) break;
  }
  close(fd);
}

}  // namespace gpucompute::loadtest
