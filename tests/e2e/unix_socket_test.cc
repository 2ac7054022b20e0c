// End to end: the server listening on several addresses at once, TCP and
// unix sockets (--listen=127.0.0.1:0,unix:PATH), the socket's mode
// (--unix_socket_mode), stale and live socket files, the default instance
// name, and the CLI and the load test against a unix: target.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/run_command.h"
#include "support/server_process.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::ServerProcess;

using testing::CommandResult;
using testing::RunCommand;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string HostName() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 && name[0] != 0 ? name : "localhost";
}

// The permission bits of `path`, or -1 when it is not a socket.
int SocketMode(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return -1;
  return static_cast<int>(st.st_mode & 07777);
}

// MatMul of fixed inputs over `target`: the result's bytes, checked against
// the product computed here.
std::string CheckedMatMul(const std::string& target) {
  auto stub = v1::Compute::NewStub(Connect(target));
  constexpr int64_t m = 7, k = 5, n = 3;
  std::vector<double> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25 * static_cast<double>(i % 11) - 1;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5 * static_cast<double>(i % 7) - 1.5;
  v1::MatMulRequest request;
  for (auto [matrix, values, rows, cols] :
       {std::tuple{request.mutable_a(), &a, m, k}, std::tuple{request.mutable_b(), &b, k, n}}) {
    matrix->set_dtype(v1::DTYPE_FLOAT64);
    matrix->set_rows(rows);
    matrix->set_cols(cols);
    matrix->set_data(values->data(), values->size() * sizeof(double));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::MatMulResponse response;
  const grpc::Status s = stub->MatMul(&ctx, request, &response);
  EXPECT_TRUE(s.ok()) << target << ": " << s.error_message();
  if (!s.ok()) return "";
  EXPECT_EQ(response.c().rows(), m);
  EXPECT_EQ(response.c().cols(), n);
  EXPECT_EQ(response.c().data().size(), static_cast<size_t>(m * n * sizeof(double)));
  if (response.c().data().size() != static_cast<size_t>(m * n * sizeof(double))) return "";
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, got = 0;
      for (int64_t p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
      std::memcpy(&got, response.c().data().data() + (i * n + j) * sizeof(double), sizeof got);
      EXPECT_NEAR(got, want, 1e-12) << target << " c[" << i << "," << j << "]";
    }
  }
  return response.c().data();
}

std::string InstanceName(const std::string& target) {
  auto stub = v1::Compute::NewStub(Connect(target));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ServerInfo info;
  const grpc::Status s = stub->GetServerInfo(&ctx, {}, &info);
  EXPECT_TRUE(s.ok()) << target << ": " << s.error_message();
  return info.instance_name();
}

class UnixSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: a socket path must fit in 107 bytes.
    char dir[] = "/tmp/gpucompute-unix-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/server.sock";
  }
  void TearDown() override { RunCommand("rm -rf " + dir_); }

  // The server with --listen=127.0.0.1:0,unix:PATH plus `flags`.
  std::unique_ptr<ServerProcess> StartBoth(std::vector<std::string> flags = {}) {
    flags.insert(
        flags.begin(),
        {"--backend=cpu", "--metrics_listen=", absl::StrCat("--listen=127.0.0.1:0,unix:", path_)});
    return std::make_unique<ServerProcess>(GPUCOMPUTE_SERVER_PATH, flags);
  }
  std::string Server(const std::string& extra) const {
    return absl::StrCat(GPUCOMPUTE_SERVER_PATH, " --backend=cpu --metrics_listen= ", extra);
  }

  std::string dir_, path_;
};

TEST_F(UnixSocketTest, TcpAndUnixAtOnceAnswerTheSameMatMul) {
  auto server = StartBoth({"--unix_socket_mode=0640"});
  ASSERT_TRUE(server->started());
  // The first address is the one printed first: the TCP one.
  EXPECT_TRUE(absl::StartsWith(server->target(), "127.0.0.1:")) << server->target();
  EXPECT_EQ(SocketMode(path_), 0640);

  const std::string over_tcp = CheckedMatMul(server->target());
  const std::string over_unix = CheckedMatMul("unix:" + path_);
  const std::string over_unix_uri = CheckedMatMul("unix://" + path_);  // unix:///tmp/...
  EXPECT_FALSE(over_tcp.empty());
  EXPECT_EQ(over_unix, over_tcp);
  EXPECT_EQ(over_unix_uri, over_tcp);

  // Health over the socket; the instance is named by the TCP address.
  auto health = grpc::health::v1::Health::NewStub(Connect("unix:" + path_));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("gpucompute.v1.Compute");
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&ctx, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(InstanceName("unix:" + path_), server->target());

  // A clean stop removes the socket file.
  EXPECT_EQ(server->Stop(SIGTERM), 0);
  EXPECT_EQ(SocketMode(path_), -1) << "the socket outlived the server";
}

TEST_F(UnixSocketTest, SocketModeDefaultsTo0660AndEmptyLeavesItAsCreated) {
  {
    auto server = StartBoth();
    ASSERT_TRUE(server->started());
    EXPECT_EQ(SocketMode(path_), 0660);
  }
  const mode_t mask = umask(0);  // the server inherits this process's umask
  umask(mask);
  auto server = StartBoth({"--unix_socket_mode="});
  ASSERT_TRUE(server->started());
  EXPECT_EQ(SocketMode(path_), static_cast<int>(0777 & ~mask));
}

TEST_F(UnixSocketTest, UnixOnlyServerIsNamedByHostAndPath) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--backend=cpu", "--metrics_listen=", "--listen=unix:" + path_});
  ASSERT_TRUE(server.started());
  EXPECT_EQ(server.target(), "unix:" + path_);
  EXPECT_EQ(InstanceName(server.target()), HostName() + ":" + path_);
  EXPECT_FALSE(CheckedMatMul(server.target()).empty());
}

TEST_F(UnixSocketTest, EveryAddressIsPrintedFirstOneFirst) {
  const std::string second = dir_ + "/second.sock", out = dir_ + "/stdout";
  // The server in the background until it printed three lines, then stopped.
  const CommandResult r = RunCommand(absl::StrCat(
      GPUCOMPUTE_SERVER_PATH, " --backend=cpu --metrics_listen= --listen=unix:", path_,
      ",127.0.0.1:0,unix:", second, " >", out, " 2>/dev/null & pid=$!; for i in $(seq 300); do ",
      "[ $(wc -l <", out, ") -ge 3 ] && break; sleep 0.1; done; kill $pid; wait $pid"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(out), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << ReadFile(out);
  EXPECT_EQ(lines[0], "gpucompute-server listening on unix:" + path_);
  EXPECT_TRUE(absl::StartsWith(lines[1], "gpucompute-server listening on 127.0.0.1:")) << lines[1];
  EXPECT_NE(lines[1], "gpucompute-server listening on 127.0.0.1:0");
  EXPECT_EQ(lines[2], "gpucompute-server listening on unix:" + second);
}

TEST_F(UnixSocketTest, StaleSocketOfACrashedServerIsReplaced) {
  {
    auto crashed = StartBoth();
    ASSERT_TRUE(crashed->started());
    EXPECT_EQ(crashed->Stop(SIGKILL), 128 + SIGKILL);
  }
  ASSERT_EQ(SocketMode(path_), 0660) << "SIGKILL leaves the socket file behind";
  auto server = StartBoth();
  ASSERT_TRUE(server->started());
  EXPECT_FALSE(CheckedMatMul("unix:" + path_).empty());
}

TEST_F(UnixSocketTest, ASecondServerDoesNotTakeALiveSocket) {
  auto first = StartBoth();
  ASSERT_TRUE(first->started());
  const CommandResult second =
      RunCommand(absl::StrCat("timeout 30 ", Server("--listen=127.0.0.1:0,unix:" + path_)));
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_TRUE(absl::StrContains(second.output, "another server is listening on unix:" + path_))
      << second.output;
  // The first still serves on its socket.
  EXPECT_FALSE(CheckedMatMul("unix:" + path_).empty());
}

TEST_F(UnixSocketTest, AFileThatIsNotASocketIsLeftAlone) {
  std::ofstream(path_) << "keep me\n";
  const CommandResult r = RunCommand(absl::StrCat("timeout 30 ", Server("--listen=unix:" + path_)));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "cannot listen on unix:" + path_)) << r.output;
  EXPECT_EQ(ReadFile(path_), "keep me\n");
}

TEST_F(UnixSocketTest, CallsOverTheSocketAreCountedInTheMetrics) {
  testing::ServerWithMetrics server = testing::StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--listen=127.0.0.1:0,unix:" + path_});
  ASSERT_TRUE(server.started());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(CheckedMatMul("unix:" + path_).empty());
  absl::StatusOr<testing::Scrape> scrape = testing::ScrapeMetricsSettled(server.metrics_port);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->Sum("gpucompute_requests_total", {{"op", "matmul"}, {"code", "OK"}}), 3);
}

TEST_F(UnixSocketTest, CliOverTheSocket) {
  auto server = StartBoth();
  ASSERT_TRUE(server->started());
  const std::string target = " --server=unix:" + path_;
  const CommandResult health = RunCommand(absl::StrCat(GPUCOMPUTE_CLI, " health", target));
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_TRUE(absl::StrContains(health.output, "SERVING")) << health.output;
  const std::string out = dir_ + "/c.npy";
  const CommandResult mm =
      RunCommand(absl::StrCat(GPUCOMPUTE_CLI, " matmul --random 20x10x5 --out ", out, target));
  EXPECT_EQ(mm.exit_code, 0) << mm.output;
  EXPECT_TRUE(absl::StrContains(mm.output, "cpu")) << mm.output;
  struct stat st;
  EXPECT_EQ(stat(out.c_str(), &st), 0) << mm.output;
  const CommandResult info = RunCommand(absl::StrCat(GPUCOMPUTE_CLI, " info", target));
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_TRUE(absl::StrContains(info.output, "unix:" + path_)) << info.output;
}

TEST_F(UnixSocketTest, LoadtestOverTheSocketEchoesOverAUnixSocketToo) {
  auto server = StartBoth();
  ASSERT_TRUE(server->started());
  const std::string csv = dir_ + "/rows.csv";
  const CommandResult r = RunCommand(absl::StrCat(
      GPUCOMPUTE_LOADTEST, " --server=unix:", path_,
      " --warmup=0.2s --window=0.3s --min_requests=5 --max_time=3s --progress=never"
      " --op=transpose --shape=32x16 --variants=auto --concurrency=1,2 --baseline=tcp --csv=",
      csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "runs over a unix socket")) << r.output;
  const std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 2 + 2) << ReadFile(csv);
  EXPECT_TRUE(absl::StartsWith(lines[1], "unix_echo,closed,1,")) << lines[1];
  EXPECT_TRUE(absl::StartsWith(lines[2], "unix_echo,closed,2,")) << lines[2];
  EXPECT_TRUE(absl::StartsWith(lines[3], "auto,closed,1,")) << lines[3];
  // Every row measured requests and none failed.
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    ASSERT_GT(cells.size(), 5u);
    EXPECT_NE(cells[5], "0") << lines[i];  // requests
  }
}

TEST_F(UnixSocketTest, AbstractSocket) {
  const std::string name = absl::StrCat("gpucompute-test-", getpid());
  ServerProcess server(
      GPUCOMPUTE_SERVER_PATH,
      {"--backend=cpu", "--metrics_listen=", "--listen=127.0.0.1:0,unix-abstract:" + name});
  ASSERT_TRUE(server.started());
  EXPECT_EQ(CheckedMatMul("unix-abstract:" + name), CheckedMatMul(server.target()));
}

// ------------------------------------------------------ bad command lines --

TEST(UnixSocketCommandLine, BadSocketModeStopsStartUp) {
  for (const char* mode : {"0999", "rw-rw----", "660x", "0o660", "177777", "-1"}) {
    const CommandResult r =
        RunCommand(absl::StrCat(GPUCOMPUTE_SERVER_PATH,
                                " --backend=cpu --metrics_listen= --listen=127.0.0.1:0,unix:/tmp/"
                                "gpucompute-unused.sock --unix_socket_mode=",
                                mode));
    EXPECT_EQ(r.exit_code, 1) << mode << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--unix_socket_mode")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "octal")) << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "listening on")) << r.output;
  }
}

TEST(UnixSocketCommandLine, BadListenListStopsStartUp) {
  for (const char* list :
       {"127.0.0.1:0,,unix:/tmp/x.sock", "127.0.0.1:0,", ",127.0.0.1:0", "",
        "unix:", "127.0.0.1:0,unix:", "unix://host/x.sock", "unix:/tmp/x.sock,unix:/tmp/x.sock"}) {
    const CommandResult r = RunCommand(absl::StrCat(
        GPUCOMPUTE_SERVER_PATH, " --backend=cpu --metrics_listen= '--listen=", list, "'"));
    EXPECT_EQ(r.exit_code, 1) << list << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "--listen")) << list << ": " << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "listening on")) << r.output;
  }
}

TEST(UnixSocketCommandLine, AnUnbindableSocketStopsStartUp) {
  const CommandResult r = RunCommand(absl::StrCat(
      "timeout 30 ", GPUCOMPUTE_SERVER_PATH,
      " --backend=cpu --metrics_listen= --listen=127.0.0.1:0,unix:/nonexistent-dir/x.sock"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "cannot listen on unix:/nonexistent-dir/x.sock"))
      << r.output;
}

TEST(UnixSocketCommandLine, HelpExplainsTheSocketMode) {
  const CommandResult help = RunCommand(absl::StrCat(GPUCOMPUTE_SERVER_PATH, " --help"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(help.output, "--unix_socket_mode")) << help.output;
  EXPECT_TRUE(absl::StrContains(help.output, "gate who can call")) << help.output;
}

}  // namespace
}  // namespace gpucompute
