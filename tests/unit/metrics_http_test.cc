// The /metrics HTTP endpoint: 200 with the rendered text, 404 elsewhere,
// 405 for other methods, and a bad address refused at start.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "server/ops/metrics_http.h"

namespace gpucompute::server {
namespace {

// Sends `request` to 127.0.0.1:port and returns the whole response.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "connect failed";
  }
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) response.append(buf, size_t(n));
  close(fd);
  return response;
}

TEST(MetricsHttpServer, ServesTheRenderedTextAtMetricsOnly) {
  int renders = 0;
  auto server = MetricsHttpServer::Start("127.0.0.1:0", [&renders] {
    ++renders;
    return std::string("gpucompute_up 1\n");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);

  const std::string ok = Exchange(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Content-Length: 16\r\n"), std::string::npos) << ok;
  EXPECT_EQ(ok.substr(ok.size() - 16), "gpucompute_up 1\n");
  EXPECT_EQ(renders, 1);

  EXPECT_EQ(Exchange(port, "GET /metrics?x=1 HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(Exchange(port, "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange(port, "POST /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(renders, 2);
}

TEST(MetricsHttpServer, RefusesBadAddressesAndBusyPorts) {
  EXPECT_EQ(MetricsHttpServer::Start("no-port", [] { return std::string(); }).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MetricsHttpServer::Start("127.0.0.1:99999", [] { return std::string(); }).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto first = MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start("127.0.0.1:" + std::to_string((*first)->port()),
                                         [] { return std::string(); });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

}  // namespace
}  // namespace gpucompute::server
