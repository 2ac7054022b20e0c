// The load test's statistics and reports, and the binary end to end against
// the real server on the CPU backend.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loadtest/load.h"
#include "loadtest/report.h"
#include "support/server_process.h"
#include "loadtest/tcp_echo.h"

namespace gpucompute::loadtest {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct RunResult {
  int exit_code;
  std::string output;
};

RunResult RunLoadtest(const std::string& args) {
  const std::string command = absl::StrCat(GPUCOMPUTE_LOADTEST_PATH, " ", args, " 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  RunResult result{-1, ""};
  if (pipe == nullptr) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

TEST(WindowStatsTest, NearestRankPercentiles) {
  WindowStats s;
  for (int i = 1; i <= 100; ++i) s.latencies_ns.push_back(i * 1000);
  EXPECT_EQ(s.Percentile(50), 50000);
  EXPECT_EQ(s.Percentile(95), 95000);
  EXPECT_EQ(s.Percentile(99), 99000);
  EXPECT_EQ(s.Percentile(100), 100000);
  WindowStats one;
  one.latencies_ns = {7};
  EXPECT_EQ(one.Percentile(50), 7);
  EXPECT_EQ(one.Percentile(99), 7);
}

TEST(ReportTest, RowSeparatesServerTimeFromTransport) {
  Measurement m;
  m.stats.duration = std::chrono::seconds(2);
  m.stats.latencies_ns = {1'000'000, 2'000'000, 3'000'000, 4'000'000};
  m.stats.has_server_report = true;
  m.stats.compute_us = 4 * 1000;
  m.stats.server_total_us = 4 * 1500;
  m.stats.errors["UNAVAILABLE"] = 2;
  m.windows = 3;
  m.stable = true;
  Row r = MakeRow("tiled32", "closed", 4, 0, 1'000'000, m);
  EXPECT_DOUBLE_EQ(r.requests_per_s, 2.0);
  EXPECT_DOUBLE_EQ(r.gbytes_per_s, 2.0 * 1e6 / 1e9);
  EXPECT_DOUBLE_EQ(r.avg_us, 2500);
  EXPECT_DOUBLE_EQ(r.p50_us, 2000);
  EXPECT_DOUBLE_EQ(r.max_us, 4000);
  EXPECT_DOUBLE_EQ(r.compute_us, 1000);
  EXPECT_DOUBLE_EQ(r.client_other_us, 1000);
  EXPECT_EQ(r.ErrorsText(), "UNAVAILABLE:2");
  const std::string csv = ToCsv({r});
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[0], ',')).size(),
            std::vector<std::string>(absl::StrSplit(lines[1], ',')).size());
  EXPECT_NE(ToHtml(RunInfo{}, {r}).find("<polyline"), std::string::npos);
}

TEST(TcpEchoTest, EchoesRequestAndResponseSizes) {
  auto server = TcpEchoServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  for (auto [request, response] : {std::pair<int64_t, int64_t>{1000, 1000}, {3000, 7}, {5, 4096}}) {
    auto driver = MakeTcpEcho((*server)->port(), request, response, 2);
    MeasureSettings settings;
    settings.warmup = absl::Milliseconds(50);
    settings.window = absl::Milliseconds(100);
    settings.max_time = absl::Seconds(2);
    Measurement m = Measure(*driver, settings, [](absl::Duration, int, const WindowStats*) {});
    EXPECT_GT(m.stats.latencies_ns.size(), 0u);
    EXPECT_TRUE(m.stats.errors.empty());
  }
}

class LoadtestBinaryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("loadtest_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Fast() const {
    return absl::StrCat("--server=", server_->target(),
                        " --warmup=0.2s --window=0.3s --min_requests=5 --max_time=3s");
  }

  static testing::ServerProcess* server_;
  std::filesystem::path dir_;
};
testing::ServerProcess* LoadtestBinaryTest::server_ = nullptr;

TEST_F(LoadtestBinaryTest, SweepsVariantsWithBaselineAndWritesReports) {
  const std::string csv = dir_ / "out.csv", json = dir_ / "out.json", html = dir_ / "out.html";
  RunResult r = RunLoadtest(absl::StrCat(Fast(),
                                         " --op=transpose --shape=64x48 --variants=all"
                                         " --concurrency=1,2 --rate=40 --baseline=tcp --csv=",
                                         csv, " --json=", json, " --html=", html));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Baseline at c=1 and c=2; auto and cpu_reference at c=1, c=2 and r=40/s.
  std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 2 + 2 * 3) << ReadFile(csv);
  EXPECT_TRUE(lines[1].starts_with("tcp_echo,closed,1,"));
  EXPECT_TRUE(lines[3].starts_with("auto,closed,1,"));
  EXPECT_TRUE(lines[5].starts_with("auto,open,0,40,"));
  EXPECT_TRUE(lines[6].starts_with("cpu_reference,closed,1,"));
  EXPECT_NE(r.output.find("xTCP"), std::string::npos) << r.output;

  const std::string j = ReadFile(json);
  EXPECT_NE(j.find("\"backend\": \"cpu\""), std::string::npos);
  EXPECT_NE(j.find("\"variant\": \"cpu_reference\""), std::string::npos);
  EXPECT_NE(j.find("\"server_us\": {\"queue\": "), std::string::npos);
  const std::string h = ReadFile(html);
  EXPECT_NE(h.find("p95 latency vs throughput"), std::string::npos);
  EXPECT_NE(h.find("<polyline"), std::string::npos);
  EXPECT_NE(h.find("tcp_echo"), std::string::npos);
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org/2000/svg"));  // no external resources
}

TEST_F(LoadtestBinaryTest, MatMulAndReduceShapes) {
  const std::string csv = dir_ / "m.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=matmul --shape=16x8x4 --dtype=float64",
                                         " --concurrency=2 --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 16x4 times 4x8 in, 16x8 out, 8 bytes each.
  EXPECT_NE(ReadFile(csv).find(absl::StrCat(",", (16 * 4 + 4 * 8 + 16 * 8) * 8, ",")),
            std::string::npos);
  r = RunLoadtest(absl::StrCat(Fast(), " --op=reduce --shape=30x20 --axis=per_column",
                               " --reduce_op=max --concurrency=1 --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(ReadFile(csv).find(absl::StrCat(",", (30 * 20 + 20) * 4, ",")), std::string::npos);
}

TEST_F(LoadtestBinaryTest, GrpcBaselineAndSeveralConnections) {
  const std::string csv = dir_ / "g.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=1x1 --variants=auto",
                                         " --concurrency=1,4 --connections=3 --baseline=grpc,tcp",
                                         " --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 connections"), std::string::npos) << r.output;
  // tcp_echo and grpc_health at c=1 and c=4 first, then auto at both.
  std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 6) << ReadFile(csv);
  EXPECT_TRUE(lines[1].starts_with("tcp_echo,closed,1,"));
  EXPECT_TRUE(lines[3].starts_with("grpc_health,closed,1,"));
  EXPECT_TRUE(lines[4].starts_with("grpc_health,closed,4,"));
  EXPECT_TRUE(lines[6].starts_with("auto,closed,4,"));
  // The health rows carry no server report and no payload, but successes.
  const std::vector<std::string> health = absl::StrSplit(lines[3], ',');
  EXPECT_EQ(health[4], "0");                  // payload_bytes
  EXPECT_GT(std::stod(health[7]), 0.0);       // requests_per_s
  EXPECT_EQ(health[15], "");                  // server_queue_us
  EXPECT_EQ(r.output.find("grpc_health      c=1      OK"), std::string::npos)
      << "health calls are not compute requests the server counts";

  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --baseline=udp"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("\"udp\" is not tcp or grpc"), std::string::npos) << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --connections=0"));
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(LoadtestBinaryTest, CountsErrorsByStatusCode) {
  const std::string csv = dir_ / "e.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=matmul --shape=512x512x512 --dtype=float64",
                                         " --concurrency=2 --deadline=1ms --csv=", csv));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // not a single success
  EXPECT_NE(ReadFile(csv).find("DEADLINE_EXCEEDED:"), std::string::npos) << ReadFile(csv);
}

TEST_F(LoadtestBinaryTest, RejectsUnknownVariantsAndBadShapes) {
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=8x8 --variants=nope"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("cpu_reference"), std::string::npos) << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=matmul --shape=8x8"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("MxNxK"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpucompute::loadtest
