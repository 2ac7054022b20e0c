#include "loadtest/tcp_echo.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
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

bool IsUnixTarget(const std::string& target) {
  return absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:");
}

absl::StatusOr<std::string> MakePrivateSocketDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && tmp[0] != 0 ? tmp : "/tmp", "/gpucompute-echo-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("echo baseline: mkdtemp ", dir, ": ", std::strerror(errno)));
  }
  return dir;
}

namespace {

absl::Status Error(EchoTransport transport, const char* what) {
  return absl::InternalError(absl::StrCat(transport == EchoTransport::kTcp ? "TCP" : "unix socket",
                                          " baseline: ", what, ": ", std::strerror(errno)));
}

sockaddr_un UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof addr.sun_path - 1);
  return addr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpEchoServer>> TcpEchoServer::Start(EchoTransport transport) {
  std::unique_ptr<TcpEchoServer> server(new TcpEchoServer);
  server->transport_ = transport;
  if (transport == EchoTransport::kUnix) {
    absl::StatusOr<std::string> dir = MakePrivateSocketDir();
    if (!dir.ok()) return dir.status();
    server->dir_ = *dir;
    server->path_ = *dir + "/echo.sock";
    if (server->path_.size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unix socket baseline: the path ", server->path_, " is too long"));
    }
    server->listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server->listen_fd_ < 0) return Error(transport, "socket");
    const sockaddr_un addr = UnixAddress(server->path_);
    if (bind(server->listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(server->listen_fd_, 128) != 0) {
      return Error(transport, "listen");
    }
  } else {
    server->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server->listen_fd_ < 0) return Error(transport, "socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (bind(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(server->listen_fd_, 128) != 0 ||
        getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return Error(transport, "listen");
    }
    server->port_ = ntohs(addr.sin_port);
  }
  server->acceptor_ = std::thread([s = server.get()] { s->Accept(); });
  return server;
}

int TcpEchoServer::Connect() const {
  if (transport_ == EchoTransport::kUnix) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const sockaddr_un addr = UnixAddress(path_);
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

TcpEchoServer::~TcpEchoServer() {
  if (listen_fd_ >= 0) {
    shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    close(listen_fd_);
  }
  // Connections end when their clients close them.
  for (std::thread& t : connections_) t.join();
  if (!path_.empty()) unlink(path_.c_str());
  if (!dir_.empty()) rmdir(dir_.c_str());
}

void TcpEchoServer::Accept() {
  while (true) {
    int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    if (transport_ == EchoTransport::kTcp) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
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
