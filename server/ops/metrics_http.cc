#include "server/ops/metrics_http.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::server {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += size_t(n);
  }
}

std::string Response(const char* status, const char* content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, Render render) {
  const size_t colon = address.rfind(':');
  int port_number = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port_number) ||
      port_number < 0 || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen: expected HOST:PORT, got \"", address, "\""));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), address.substr(colon + 1).c_str(),
                           &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen: cannot resolve \"", host, "\": ", gai_strerror(rc)));
  }
  int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    freeaddrinfo(found);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("--metrics_listen: cannot listen on ", address, ": ", std::strerror(err)));
  }
  freeaddrinfo(found);
  sockaddr_storage bound = {};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError("--metrics_listen: pipe failed");
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, wake, port, std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd[2], int port, Render render)
    : listen_fd_(listen_fd),
      wake_read_fd_(wake_fd[0]),
      wake_write_fd_(wake_fd[1]),
      port_(port),
      render_(std::move(render)) {
  thread_ = std::thread([this] { AcceptLoop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 0;
  (void)!write(wake_write_fd_, &byte, 1);
  thread_.join();
  close(listen_fd_);
  close(wake_read_fd_);
  close(wake_write_fd_);
}

void MetricsHttpServer::AcceptLoop() {
  common::NameThisThread("metrics-http");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

// One request per connection; a scraper that stalls is dropped after 5 s.
void MetricsHttpServer::Answer(int fd) const {
  timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, size_t(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  const bool get = line.rfind("GET ", 0) == 0;
  const size_t path_start = line.find(' ') + 1;
  std::string path = line.substr(path_start, line.find(' ', path_start) - path_start);
  path = path.substr(0, path.find('?'));
  if (!get) {
    WriteAll(fd, Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n"));
  } else if (path != "/metrics") {
    WriteAll(fd, Response("404 Not Found", "text/plain", "see /metrics\n"));
  } else {
    WriteAll(fd, Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", render_()));
  }
}

}  // namespace gpucompute::server
