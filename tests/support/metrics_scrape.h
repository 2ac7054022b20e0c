// Helpers for tests of the Prometheus endpoint: start a server with metrics
// on a free loopback port, fetch /metrics over plain HTTP, and parse the
// text format into samples that can be summed by label.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "support/server_process.h"

namespace gpucompute::testing {

// A loopback TCP port that was free a moment ago.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

struct ServerWithMetrics {
  std::unique_ptr<ServerProcess> process;
  int metrics_port = 0;
  bool started() const { return process && process->started(); }
};

// Starts the server with --metrics_listen on a free port. The port can be
// taken between the probe and the server's bind (the server then exits,
// since a non-default address must bind), so a few ports are tried.
inline ServerWithMetrics StartServerWithMetrics(const std::string& binary,
                                                std::vector<std::string> flags) {
  ServerWithMetrics server;
  for (int attempt = 0; attempt < 5 && !server.started(); ++attempt) {
    server.metrics_port = FreeLoopbackPort();
    std::vector<std::string> all = flags;
    all.push_back(absl::StrCat("--metrics_listen=127.0.0.1:", server.metrics_port));
    server.process = std::make_unique<ServerProcess>(binary, all);
  }
  return server;
}

// GET http://127.0.0.1:port/path; the body of a 200 answer.
inline absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) != ssize_t(request.size())) {
    close(fd);
    return absl::InternalError("send failed");
  }
  std::string response;
  char buffer[16384];
  for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, size_t(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::InternalError("no HTTP header in the answer");
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200 ") == std::string::npos) {
    return absl::InternalError(absl::StrCat("HTTP answer: ", status_line));
  }
  return response.substr(body + 4);
}

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Samples of the Prometheus text exposition format, plus the TYPE of each
// family. Label values here never hold escaped quotes, which keeps this short.
struct Scrape {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;

  // Sum over samples named `name` whose labels include all of `match`.
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const {
    double total = 0;
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [key, value] : match) {
        auto it = s.labels.find(key);
        all = all && it != s.labels.end() && it->second == value;
      }
      if (all) total += s.value;
    }
    return total;
  }
  bool Has(const std::string& name) const {
    for (const Sample& s : samples) {
      if (s.name == name) return true;
    }
    return false;
  }
};

inline absl::StatusOr<Scrape> ParseExposition(const std::string& text) {
  Scrape scrape;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      scrape.types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    Sample sample;
    size_t at = line.find_first_of("{ ");
    if (at == std::string::npos) return absl::InvalidArgumentError("bad sample: " + line);
    sample.name = line.substr(0, at);
    if (line[at] == '{') {
      const size_t close = line.find('}', at);
      if (close == std::string::npos) return absl::InvalidArgumentError("bad labels: " + line);
      std::string labels = line.substr(at + 1, close - at - 1);
      size_t pos = 0;
      while (pos < labels.size()) {
        const size_t eq = labels.find("=\"", pos);
        const size_t end = labels.find('"', eq + 2);
        if (eq == std::string::npos || end == std::string::npos) {
          return absl::InvalidArgumentError("bad labels: " + line);
        }
        sample.labels[labels.substr(pos, eq - pos)] = labels.substr(eq + 2, end - eq - 2);
        pos = end + 1;
        if (pos < labels.size() && labels[pos] == ',') ++pos;
      }
      at = close + 1;
    }
    char* end = nullptr;
    const std::string value = line.substr(line.find_first_not_of(' ', at));
    sample.value = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) return absl::InvalidArgumentError("bad value: " + line);
    scrape.samples.push_back(std::move(sample));
  }
  return scrape;
}

inline absl::StatusOr<Scrape> ScrapeMetrics(int port) {
  auto body = HttpGet(port, "/metrics");
  if (!body.ok()) return body.status();
  return ParseExposition(*body);
}

// The metrics once every call the server began is counted. A call is
// counted when it is done (its reactor's OnDone), which can come just after
// its client has the answer: waits (up to `timeout`) for
// gpucompute_requests_in_flight to read 0, then scrapes once more, so that
// every call that read saw done is in the counts.
inline absl::StatusOr<Scrape> ScrapeMetricsSettled(
    int port, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto scrape = ScrapeMetrics(port);
    if (!scrape.ok()) return scrape;
    if (scrape->Sum("gpucompute_requests_in_flight") == 0 ||
        std::chrono::steady_clock::now() >= give_up) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ScrapeMetrics(port);
}

}  // namespace gpucompute::testing
