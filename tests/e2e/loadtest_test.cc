// The load test's statistics and reports, and the binary end to end against
// the real server on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "loadtest/grpc_echo.h"
#include "loadtest/load.h"
#include "loadtest/report.h"
#include "loadtest/tcp_echo.h"
#include "src/unary_call.h"
#include "support/run_command.h"
#include "support/server_process.h"

namespace gpucompute::loadtest {
namespace {

// The --json report read back into its message; fails on unknown keys.
tools::v1::LoadtestReport ParseReport(const std::string& json) {
  tools::v1::LoadtestReport report;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &report);
  EXPECT_TRUE(parsed.ok()) << parsed.ToString() << "\n" << json;
  return report;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The integer that follows the first `marker` in `text`; -1 when there is
// none.
int64_t NumberAfter(const std::string& text, const std::string& marker) {
  const size_t at = text.find(marker);
  if (at == std::string::npos) return -1;
  int64_t value = -1;
  for (size_t i = at + marker.size(); i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    value = (value < 0 ? 0 : value * 10) + (text[i] - '0');
  }
  return value;
}

// The cell of `column` in a CSV line (unquoted fields), found by the header's names.
std::string CsvCell(const std::string& header, const std::string& line, const std::string& column) {
  const std::vector<std::string> names = absl::StrSplit(header, ',');
  const std::vector<std::string> cells = absl::StrSplit(line, ',');
  const auto it = std::find(names.begin(), names.end(), column);
  if (it == names.end() || cells.size() != names.size()) return "<no " + column + ">";
  return cells[it - names.begin()];
}

using RunResult = testing::CommandResult;

RunResult RunLoadtest(const std::string& args) {
  return testing::RunCommand(absl::StrCat(GPUCOMPUTE_LOADTEST_PATH, " ", args));
}

TEST(LoadtestCommandLine, HelpListsTheFlagsAndExitsZeroVersionPrintsTheVersion) {
  RunResult help = RunLoadtest("--help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--server="), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--concurrency="), std::string::npos);
  EXPECT_EQ(help.output.find("No flags matched"), std::string::npos);
  RunResult version = RunLoadtest("--version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.output.rfind("gpucompute-loadtest 0.", 0), 0u) << version.output;
}

// A command line abseil would refuse is a usage error like any other:
// exit 2 with a message that names the flag (abseil's own parse exits 1).
TEST(LoadtestCommandLine, FlagSyntaxErrorsExitTwoNamingTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {"--no_such_flag=1", "unknown flag --no_such_flag"},
      {"--busy_poll=maybe", "--busy_poll: \"maybe\" is not a valid value"},
      {"--nobusy_poll=1", "--nobusy_poll takes no value"},
      {"--shape=2x2 --op", "--op needs a value"},
  };
  for (const auto& [args, message] : cases) {
    RunResult r = RunLoadtest(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
  }
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

TEST(WorkloadTest, ShapesAndPayloads) {
  Workload matmul{.op = v1::OP_MATMUL, .dtype = DType::kFloat64, .m = 16, .n = 4, .k = 8};
  EXPECT_EQ(matmul.ShapeText(), "16x8x4");  // MxKxN
  EXPECT_EQ(matmul.OutputRows(), 16);
  EXPECT_EQ(matmul.OutputCols(), 4);
  EXPECT_EQ(matmul.RequestPayloadBytes(), (16 * 8 + 8 * 4) * 8);
  EXPECT_EQ(matmul.ResponsePayloadBytes(), 16 * 4 * 8);

  Workload transpose{.op = v1::OP_TRANSPOSE, .m = 30, .n = 20};
  EXPECT_EQ(transpose.ShapeText(), "30x20");
  EXPECT_EQ(transpose.OutputRows(), 20);
  EXPECT_EQ(transpose.OutputCols(), 30);
  EXPECT_EQ(transpose.RequestPayloadBytes(), 30 * 20 * 4);
  EXPECT_EQ(transpose.ResponsePayloadBytes(), 30 * 20 * 4);

  Workload reduce{.op = v1::OP_REDUCE, .m = 30, .n = 20, .axis = v1::REDUCE_AXIS_PER_COLUMN};
  EXPECT_EQ(reduce.OutputRows(), 1);
  EXPECT_EQ(reduce.OutputCols(), 20);
  reduce.axis = v1::REDUCE_AXIS_PER_ROW;
  EXPECT_EQ(reduce.OutputRows(), 30);
  EXPECT_EQ(reduce.OutputCols(), 1);
  reduce.axis = v1::REDUCE_AXIS_ALL;
  EXPECT_EQ(reduce.ResponsePayloadBytes(), 4);
}

// The mean server batch: ExecutionReport.batch_size over the row's reports,
// 0 (alone, or a server from before batching) read as 1.
TEST(ReportTest, MeanBatchSizeCountsZeroAsOne) {
  Recorder recorder;
  for (int batch : {0, 1, 4, 3}) {
    v1::ExecutionReport report;
    report.set_batch_size(batch);
    report.set_total_us(10);
    recorder.Ok(std::chrono::microseconds(100), &report);
  }
  Measurement m;
  m.stats = recorder.Take();
  EXPECT_EQ(m.stats.batch_sum, 1 + 1 + 4 + 3);
  WindowStats other;
  other.has_server_report = true;
  other.latencies_ns = {1000};
  other.batch_sum = 7;
  m.stats.Merge(other);
  std::sort(m.stats.latencies_ns.begin(), m.stats.latencies_ns.end());
  Row r = MakeRow("auto", "closed", 8, 0, 0, m);
  EXPECT_DOUBLE_EQ(r.batch, 16.0 / 5);
  EXPECT_NE(FormatTableRow(r).find(" 3.20 "), std::string::npos) << FormatTableRow(r);
  EXPECT_NE(FormatTableHeader().find(" batch "), std::string::npos);
  const std::vector<std::string> csv = absl::StrSplit(ToCsv({r}), '\n', absl::SkipEmpty());
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_TRUE(csv[0].ends_with(",batch,label,way_in_us,way_out_us")) << csv[0];
  EXPECT_TRUE(csv[1].ends_with(",3.2,,,")) << csv[1];  // no label, no ways
  EXPECT_NE(ToHtml(RunInfo{}, {r}).find("<td>3.20</td>"), std::string::npos);

  // No server report (a baseline): no batch anywhere.
  Measurement echo_m;
  echo_m.stats.duration = std::chrono::seconds(1);
  echo_m.stats.latencies_ns = {1000};
  Row echo = MakeRow(kTcpEcho, "closed", 8, 0, 0, echo_m);
  EXPECT_EQ(echo.batch, 0);
  const std::vector<std::string> echo_csv = absl::StrSplit(ToCsv({echo}), '\n', absl::SkipEmpty());
  EXPECT_TRUE(echo_csv[1].ends_with(",0,,,,")) << echo_csv[1];  // connections 0, no batch
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

// A report that says when the server took the request splits the time
// outside the server into the way in and the way out; one without it (an
// older server) leaves the row without them.
TEST(ReportTest, ReceivedTimeSplitsTheWayInFromTheWayOut) {
  Recorder recorder;
  const int64_t answered_ns = 1'700'000'000'000'000'000;
  v1::ExecutionReport report;
  report.set_total_us(30);
  // Sent 100 us before the answer was read; taken 20 us after it was sent.
  report.set_received_unix_ns(answered_ns - 80'000);
  recorder.Ok(std::chrono::microseconds(100), &report, answered_ns);
  report.set_received_unix_ns(answered_ns - 60'000);  // taken 40 us after it was sent
  recorder.Ok(std::chrono::microseconds(100), &report, answered_ns);
  v1::ExecutionReport unstamped;
  unstamped.set_total_us(30);
  recorder.Ok(std::chrono::microseconds(100), &unstamped, answered_ns);
  Measurement m;
  m.stats = recorder.Take();
  m.stats.duration = std::chrono::seconds(1);
  EXPECT_EQ(m.stats.stamped, 2);
  Row r = MakeRow("auto", "closed", 2, 0, 0, m);
  ASSERT_TRUE(r.has_ways);
  EXPECT_DOUBLE_EQ(r.way_in_us, 30);   // (20 + 40) / 2
  EXPECT_DOUBLE_EQ(r.way_out_us, 40);  // (50 + 30) / 2: 100 - in - 30 in the server
  const std::string ways = FormatWays({r});
  const std::string words =
      absl::StrJoin(std::vector<std::string>(absl::StrSplit(ways, ' ', absl::SkipEmpty())), " ");
  EXPECT_NE(words.find("in 30 us server 30 us out 40 us"), std::string::npos) << ways;
  const std::vector<std::string> csv = absl::StrSplit(ToCsv({r}), '\n', absl::SkipEmpty());
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_TRUE(csv[1].ends_with(",30,40")) << csv[1];
  absl::StatusOr<std::string> json = ToJson(RunInfo{}, {r});
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<RunReport> read = FromJson(*json);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->rows.size(), 1u);
  EXPECT_TRUE(read->rows[0].has_ways);
  EXPECT_DOUBLE_EQ(read->rows[0].way_out_us, 40);

  Recorder old_server;
  old_server.Ok(std::chrono::microseconds(100), &unstamped, answered_ns);
  m.stats = old_server.Take();
  m.stats.duration = std::chrono::seconds(1);
  EXPECT_FALSE(MakeRow("auto", "closed", 1, 0, 0, m).has_ways);
  EXPECT_EQ(FormatWays({MakeRow("auto", "closed", 1, 0, 0, m)}), "");
}

// The JSON keys and value types that consumers of today's --json read.
TEST(ReportTest, JsonKeepsKeysAndNumbers) {
  Measurement m;
  m.stats.duration = std::chrono::seconds(1);
  m.stats.latencies_ns = {1'000'000, 3'000'000};
  m.stats.has_server_report = true;
  m.stats.queue_us = 2 * 100;
  m.stats.server_total_us = 2 * 1500;
  m.stats.batch_sum = 2 + 1;
  m.stats.errors["UNAVAILABLE"] = 2;
  m.answered_ok = 7;
  m.answered_errors["DEADLINE_EXCEEDED"] = 1;
  m.windows = 3;
  m.stable = true;
  Row compute = MakeRow("tiled32", "closed", 4, 0, 3'000'000'000, m);
  compute.vs_tcp = 0.5;
  compute.vs_grpc_echo = 0.25;
  Measurement echo_m;
  echo_m.stats.duration = std::chrono::seconds(1);
  echo_m.stats.latencies_ns = {1000};
  Row echo = MakeRow(kTcpEcho, "closed", 4, 0, 3'000'000'000, echo_m);
  RunInfo info;
  info.backend = "cpu \"quoted\"\n";
  info.devices = {"cuda:0 H200", "cuda:1 H200"};
  info.op = "matmul";
  info.shape = "64x32x16";
  info.request_payload_bytes = 5'000'000'000;

  absl::StatusOr<std::string> json = ToJson(info, {compute, echo});
  ASSERT_TRUE(json.ok()) << json.status();
  // Integers print as JSON numbers, not the strings proto3 uses for int64.
  EXPECT_NE(json->find("\"request_payload_bytes\": 5000000000,"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"payload_bytes\": 3000000000,"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"concurrency\": 4,"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"UNAVAILABLE\": 2"), std::string::npos) << *json;
  EXPECT_NE(json->find("\"reduce\": \"\""), std::string::npos) << "zero values keep their key";
  EXPECT_NE(json->find("\"backend\": \"cpu \\\"quoted\\\"\\n\""), std::string::npos) << *json;

  const tools::v1::LoadtestReport report = ParseReport(*json);
  EXPECT_EQ(report.shape(), "64x32x16");
  ASSERT_EQ(report.devices_size(), 2);
  ASSERT_EQ(report.rows_size(), 2);
  const auto& c = report.rows(0);
  EXPECT_EQ(c.variant(), "tiled32");
  EXPECT_EQ(c.requests(), 2);
  EXPECT_DOUBLE_EQ(c.latency_us().avg(), 2000);
  EXPECT_DOUBLE_EQ(c.latency_us().max(), 3000);
  ASSERT_TRUE(c.has_server_us());
  EXPECT_DOUBLE_EQ(c.server_us().queue(), 100);
  EXPECT_DOUBLE_EQ(c.server_us().total(), 1500);
  ASSERT_TRUE(c.has_client_other_us());
  EXPECT_DOUBLE_EQ(c.client_other_us(), 500);
  EXPECT_DOUBLE_EQ(c.vs_tcp(), 0.5);
  EXPECT_DOUBLE_EQ(c.vs_grpc_echo(), 0.25);
  ASSERT_TRUE(c.has_batch());
  EXPECT_DOUBLE_EQ(c.batch(), 1.5);
  EXPECT_EQ(c.errors().at("UNAVAILABLE"), 2);
  EXPECT_EQ(c.answered().ok(), 7);
  EXPECT_EQ(c.answered().errors().at("DEADLINE_EXCEEDED"), 1);
  EXPECT_EQ(c.windows(), 3);
  EXPECT_TRUE(c.stable());
  // No server report, no TCP comparison: the keys are absent.
  const auto& e = report.rows(1);
  EXPECT_EQ(e.variant(), "tcp_echo");
  EXPECT_FALSE(e.has_server_us());
  EXPECT_FALSE(e.has_client_other_us());
  EXPECT_FALSE(e.has_vs_tcp());
  EXPECT_FALSE(e.has_vs_grpc_echo());
  EXPECT_FALSE(e.has_batch());
}

// --json read back (what --merge_json does) gives the rows that were written,
// and runs of one workload merge in order, unlabelled rows named after their file.
TEST(ReportTest, JsonReadsBackAndRunsMerge) {
  Measurement m;
  m.stats.duration = std::chrono::seconds(1);
  m.stats.latencies_ns = {1'000'000, 3'000'000};
  m.stats.has_server_report = true;
  m.stats.server_total_us = 2 * 1500;
  m.stats.batch_sum = 3;
  m.stats.errors["UNAVAILABLE"] = 2;
  m.answered_ok = 7;
  m.windows = 3;
  m.stable = true;
  Row compute = MakeRow("tiled32", "closed", 4, 0, 3000, m);
  compute.vs_tcp = 0.5;
  compute.vs_grpc_echo = 0.25;
  compute.connections = 8;
  compute.placement = "tensor";
  compute.label = "delay=100us, \"max\" 4";
  EXPECT_EQ(compute.Label(), "tiled32 [tensor] delay=100us, \"max\" 4");
  Measurement echo_m;
  echo_m.stats.duration = std::chrono::seconds(1);
  echo_m.stats.latencies_ns = {1000};
  Row echo = MakeRow(kTcpEcho, "closed", 4, 0, 3000, echo_m);
  RunInfo info;
  info.server = "127.0.0.1:1";
  info.op = "matmul";
  info.dtype = "float32";
  info.shape = "64x32x16";
  info.settings = "warm-up 1s";
  info.placement = "inline,tensor";

  // The label is one CSV field, quoted.
  const std::vector<std::string> csv = absl::StrSplit(ToCsv({compute}), '\n', absl::SkipEmpty());
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_TRUE(csv[0].ends_with(",connections,batch,label,way_in_us,way_out_us")) << csv[0];
  EXPECT_TRUE(csv[1].ends_with(",8,1.5,\"delay=100us, \"\"max\"\" 4\",,")) << csv[1];

  absl::StatusOr<std::string> json = ToJson(info, {compute, echo});
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<RunReport> read = FromJson(*json);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->info.server, "127.0.0.1:1");
  EXPECT_EQ(read->info.shape, "64x32x16");
  EXPECT_EQ(read->info.placement, "inline,tensor");
  ASSERT_EQ(read->rows.size(), 2u);
  // Written again, the rows read back print as they did.
  EXPECT_EQ(ToCsv(read->rows), ToCsv({compute, echo}));
  EXPECT_EQ(FormatTableRow(read->rows[0]), FormatTableRow(compute));
  EXPECT_EQ(FormatTableRow(read->rows[1]), FormatTableRow(echo));
  EXPECT_EQ(read->rows[0].answered_ok, 7);
  EXPECT_FALSE(read->rows[1].has_server_report);
  EXPECT_FALSE(FromJson("{\"rows\": 3}").ok());

  RunReport plain = *read;
  for (Row& r : plain.rows) r.label.clear();
  plain.info.server = "127.0.0.1:2";
  absl::StatusOr<RunReport> merged =
      MergeRuns({"out/delay100.json", "out/plain.json"}, {*read, plain});
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->rows.size(), 4u);
  EXPECT_EQ(merged->rows[0].label, compute.label);
  EXPECT_EQ(merged->rows[1].label, "delay100");  // had none: its file's name
  EXPECT_EQ(merged->rows[2].label, "plain");
  EXPECT_EQ(merged->info.server, "127.0.0.1:1, 127.0.0.1:2");
  ASSERT_EQ(merged->info.merged.size(), 2u);
  EXPECT_EQ(merged->info.merged[1].file, "out/plain.json");
  EXPECT_EQ(merged->info.merged[1].server, "127.0.0.1:2");
  EXPECT_EQ(merged->info.merged[1].labels, "plain");
  EXPECT_EQ(LabelWidth(merged->rows), static_cast<int>(compute.Label().size()));
  const tools::v1::LoadtestReport report = ParseReport(*ToJson(merged->info, merged->rows));
  ASSERT_EQ(report.merged_from_size(), 2);
  EXPECT_EQ(report.merged_from(0), "out/delay100.json");
  EXPECT_EQ(report.rows(3).label(), "plain");
  // Equal stems: the paths as given.
  merged = MergeRuns({"a/run.json", "b/run.json"}, {plain, plain});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->rows[0].label, "a/run.json");
  EXPECT_EQ(merged->rows[2].label, "b/run.json");
  // One file: re-rendered as it was.
  merged = MergeRuns({"plain.json"}, {plain});
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->rows[0].label, "");

  RunReport other = plain;
  other.info.shape = "8x8x8";
  merged = MergeRuns({"a.json", "b.json"}, {plain, other});
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.status().message(),
            "--merge_json: b.json measured matmul 8x8x8 float32, a.json matmul 64x32x16 float32; "
            "merge runs of one workload");
}

class EchoTest : public ::testing::TestWithParam<EchoTransport> {};

TEST_P(EchoTest, EchoesRequestAndResponseSizes) {
  auto server = TcpEchoServer::Start(GetParam());
  ASSERT_TRUE(server.ok()) << server.status();
  for (auto [request, response] : {std::pair<int64_t, int64_t>{1000, 1000}, {3000, 7}, {5, 4096}}) {
    auto driver = MakeTcpEcho(server->get(), request, response, 2);
    MeasureSettings settings;
    settings.warmup = absl::Milliseconds(50);
    settings.window = absl::Milliseconds(100);
    settings.max_time = absl::Seconds(2);
    Measurement m = Measure(*driver, settings, [](absl::Duration, int, const WindowStats*) {});
    EXPECT_GT(m.stats.latencies_ns.size(), 0u);
    EXPECT_TRUE(m.stats.errors.empty());
  }
  if (GetParam() == EchoTransport::kUnix) {
    const std::string path = (*server)->path();
    EXPECT_TRUE(std::filesystem::exists(path)) << path;
    server->reset();
    EXPECT_FALSE(std::filesystem::exists(path)) << "the echo's socket outlived it";
  }
}

INSTANTIATE_TEST_SUITE_P(TcpAndUnix, EchoTest,
                         ::testing::Values(EchoTransport::kTcp, EchoTransport::kUnix),
                         [](const auto& info) {
                           return info.param == EchoTransport::kTcp ? "Tcp" : "Unix";
                         });

// The gRPC echo answers the compute methods with its canned response,
// counting what each call carried, and nothing else: on callback threads
// (0 queues) and on completion queues, as the server may serve them.
class GrpcEchoTest : public ::testing::TestWithParam<std::tuple<EchoTransport, int>> {};

TEST_P(GrpcEchoTest, AnswersComputeCallsWithItsResponse) {
  const std::string canned(5000, 'r');
  grpc::Slice canned_slice(canned);
  const auto [transport, queues] = GetParam();
  auto server = GrpcEchoServer::Start(transport, grpc::ByteBuffer(&canned_slice, 1), queues);
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::GenericStub stub(
      grpc::CreateChannel((*server)->target(), grpc::InsecureChannelCredentials()));
  grpc::Slice request_slice(std::string(1000, 'q'));
  const grpc::ByteBuffer request(&request_slice, 1);
  for (const char* method : {"/gpucompute.v1.Compute/MatMul", "/gpucompute.v1.Compute/Reduce"}) {
    grpc::ClientContext context;
    grpc::ByteBuffer response;
    grpc::Status status =
        internal::UnaryOnThisThread(stub, &context, method, request, &response, false);
    ASSERT_TRUE(status.ok()) << method << ": " << status.error_message();
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(response.Dump(&slices).ok());
    std::string bytes;
    for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
    EXPECT_EQ(bytes, canned) << method;
  }
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  EXPECT_EQ(internal::UnaryOnThisThread(stub, &context, "/gpucompute.v1.Compute/ListTensors",
                                        request, &response, false)
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ((*server)->calls(), 2);
  EXPECT_EQ((*server)->request_bytes(), 2 * 1000);
  EXPECT_EQ((*server)->response_bytes(), 2 * 5000);
  if (transport == EchoTransport::kUnix) {
    const std::string path = (*server)->target().substr(std::string("unix:").size());
    EXPECT_TRUE(std::filesystem::exists(path)) << path;
    server->reset();
    EXPECT_FALSE(std::filesystem::exists(path)) << "the echo's socket outlived it";
  }
}

INSTANTIATE_TEST_SUITE_P(TcpAndUnix, GrpcEchoTest,
                         ::testing::Combine(::testing::Values(EchoTransport::kTcp,
                                                              EchoTransport::kUnix),
                                            ::testing::Values(0, 2)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) == EchoTransport::kTcp ? "Tcp" : "Unix",
                               "Queues", std::get<1>(info.param));
                         });

TEST(EchoTarget, UnixTargetsAreRecognised) {
  EXPECT_TRUE(IsUnixTarget("unix:/run/gpucompute/gpucompute.sock"));
  EXPECT_TRUE(IsUnixTarget("unix:///run/gpucompute/gpucompute.sock"));
  EXPECT_TRUE(IsUnixTarget("unix-abstract:gpucompute"));
  EXPECT_FALSE(IsUnixTarget("localhost:50051"));
  EXPECT_FALSE(IsUnixTarget("dns:///unix:50051"));
}

class LoadtestBinaryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(GPUCOMPUTE_SERVER_PATH,
                                         {"--backend=cpu", "--allow_shared_memory"});
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
  // Rows of one short window each, for tests of how rows are swept, labelled
  // and merged rather than of how they are measured.
  std::string Fastest() const { return absl::StrCat(Fast(), " --warmup=0.1s --stable_windows=1"); }

  static testing::ServerProcess* server_;
  std::filesystem::path dir_;
};
testing::ServerProcess* LoadtestBinaryTest::server_ = nullptr;

TEST_F(LoadtestBinaryTest, SweepsVariantsWithBaselineAndWritesReports) {
  const std::string csv = dir_ / "out.csv", json = dir_ / "out.json", html = dir_ / "out.html";
  RunResult r = RunLoadtest(absl::StrCat(Fastest(),
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
  EXPECT_NE(j.find("\"backend\": \"cpu\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"variant\": \"cpu_reference\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"request_payload_bytes\": 12288,"), std::string::npos) << j;  // 64x48x4
  const tools::v1::LoadtestReport report = ParseReport(j);
  EXPECT_EQ(report.op(), "transpose");
  EXPECT_EQ(report.shape(), "64x48");
  ASSERT_EQ(report.rows_size(), 2 + 2 * 3) << j;
  EXPECT_EQ(report.rows(0).variant(), "tcp_echo");
  EXPECT_FALSE(report.rows(0).has_server_us());
  EXPECT_FALSE(report.rows(0).has_batch());
  for (int i = 2; i < report.rows_size(); ++i) {
    const auto& row = report.rows(i);
    EXPECT_TRUE(row.has_server_us()) << row.variant();
    EXPECT_GE(row.batch(), 1) << row.variant();  // 1: alone
    EXPECT_GT(row.requests(), 0) << row.variant();
    EXPECT_GE(row.latency_us().p95(), row.latency_us().p50()) << row.variant();
    EXPECT_GT(row.answered().ok(), 0) << row.variant();
    // One host: the ways in and out are real spans, though clocks read
    // apart may put a few microseconds on the wrong side.
    ASSERT_TRUE(row.has_way_in_us()) << row.variant();
    EXPECT_GT(row.way_in_us(), -50) << row.variant();
    EXPECT_GT(row.way_out_us(), -50) << row.variant();
  }
  EXPECT_FALSE(report.rows(0).has_way_in_us());  // an echo: no server report
  EXPECT_NE(r.output.find("where the mean call went"), std::string::npos) << r.output;
  EXPECT_EQ(report.rows(4).mode(), "open");
  EXPECT_DOUBLE_EQ(report.rows(4).rate(), 40);
  EXPECT_TRUE(report.rows(2).has_vs_tcp());  // auto c=1 beside tcp_echo c=1
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
  // MxKxN, as the CLI takes it: 16x8 times 8x4 in, 16x4 out, 8 bytes each.
  EXPECT_NE(r.output.find("matmul 16x8x4 float64 (16x8 times 8x4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("payload per request: 1280 bytes sent, 512 received"), std::string::npos)
      << r.output;
  EXPECT_NE(ReadFile(csv).find(absl::StrCat(",", (16 * 8 + 8 * 4 + 16 * 4) * 8, ",")),
            std::string::npos);
  r = RunLoadtest(absl::StrCat(Fast(), " --op=reduce --shape=30x20 --axis=per_column",
                               " --reduce_op=max --concurrency=1 --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(ReadFile(csv).find(absl::StrCat(",", (30 * 20 + 20) * 4, ",")), std::string::npos);
}

TEST_F(LoadtestBinaryTest, GrpcBaselineAndSeveralConnections) {
  const std::string csv = dir_ / "g.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fastest(), " --op=transpose --shape=1x1 --variants=auto",
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
  EXPECT_EQ(health[4], "0");             // payload_bytes
  EXPECT_GT(std::stod(health[7]), 0.0);  // requests_per_s
  EXPECT_EQ(health[15], "");             // server_queue_us
  EXPECT_EQ(r.output.find("grpc_health      c=1      OK"), std::string::npos)
      << "health calls are not compute requests the server counts";

  // One --connections value: every gRPC row carries it, the echo none.
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(CsvCell(lines[0], lines[i], "connections"), i <= 2 ? "0" : "3") << lines[i];
  }

  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --baseline=udp"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("\"udp\" is not tcp, grpc, service or echo"), std::string::npos)
      << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --connections=0"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--connections: \"0\" is not a whole number from 1 to 2147483647"),
            std::string::npos)
      << r.output;
}

// --connections=1,2: the grpc baseline and every variant swept at each count
// in turn (the echo once: it opens its own sockets), each row with its count
// in the table, CSV, JSON and the HTML's series names.
TEST_F(LoadtestBinaryTest, ConnectionsListSweepsEveryCount) {
  const std::string csv = dir_ / "c.csv", json = dir_ / "c.json", html = dir_ / "c.html";
  RunResult r = RunLoadtest(absl::StrCat(
      Fastest(), " --op=transpose --shape=3x2 --variants=auto --concurrency=1,2 --connections=1,2",
      " --baseline=grpc,tcp --csv=", csv, " --json=", json, " --html=", html));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1,2 connections"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" conn "), std::string::npos) << "the table's column: " << r.output;
  EXPECT_NE(r.output.find("c=2 conn=2 OK"), std::string::npos) << r.output;
  const std::vector<std::tuple<std::string, int, int>> expected = {
      {"tcp_echo", 1, 0},    {"tcp_echo", 2, 0},    {"grpc_health", 1, 1}, {"grpc_health", 2, 1},
      {"grpc_health", 1, 2}, {"grpc_health", 2, 2}, {"auto", 1, 1},        {"auto", 2, 1},
      {"auto", 1, 2},        {"auto", 2, 2}};
  std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1 + expected.size()) << ReadFile(csv);
  EXPECT_TRUE(lines[0].ends_with(",connections,batch,label,way_in_us,way_out_us")) << lines[0];
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  ASSERT_EQ(report.rows_size(), static_cast<int>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& [variant, concurrency, connections] = expected[i];
    const std::vector<std::string> cells = absl::StrSplit(lines[i + 1], ',');
    EXPECT_EQ(cells[0], variant) << lines[i + 1];
    EXPECT_EQ(cells[2], absl::StrCat(concurrency)) << lines[i + 1];
    EXPECT_EQ(CsvCell(lines[0], lines[i + 1], "connections"), absl::StrCat(connections));
    const auto& row = report.rows(static_cast<int>(i));
    EXPECT_EQ(row.variant(), variant);
    EXPECT_EQ(row.concurrency(), concurrency);
    EXPECT_EQ(row.connections(), connections);
    EXPECT_GT(row.requests(), 0) << variant;
    // The server's mean batch: compute rows only; one request in flight runs alone.
    EXPECT_EQ(row.has_batch(), variant == "auto") << variant;
    EXPECT_EQ(CsvCell(lines[0], lines[i + 1], "batch") != "", variant == "auto") << lines[i + 1];
    if (variant == "auto" && concurrency == 1) {
      EXPECT_DOUBLE_EQ(row.batch(), 1);
    }
  }
  const std::string h = ReadFile(html);
  for (const char* series : {"auto conn=1", "auto conn=2", "grpc_health conn=2"}) {
    EXPECT_NE(h.find(absl::StrCat(">", series, "</text>")), std::string::npos) << series;
  }
  EXPECT_EQ(h.find("tcp_echo conn="), std::string::npos);

  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --connections=1,x"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--connections: \"x\" is not a whole number from 1 to 2147483647"),
            std::string::npos)
      << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=upload --shape=2x2 --connections=1,4"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--connections: upload and download rows stream over"), std::string::npos)
      << r.output;
}

// --label tags every row; --merge_json renders earlier runs' --json files
// together (as bench/batching_sweep.sh does for servers with different
// --batch_delay_us), running nothing.
TEST_F(LoadtestBinaryTest, LabelledRunsMergeIntoOneReport) {
  const std::string a = dir_ / "delay0.json", b = dir_ / "delay50.json", c = dir_ / "plain.json";
  const std::string b_csv = dir_ / "b.csv", missing = dir_ / "missing.json";
  const std::string run = absl::StrCat(
      Fastest(), " --op=matmul --shape=8x8x8 --variants=auto --concurrency=1,2 --baseline=grpc");
  RunResult r = RunLoadtest(absl::StrCat(run, " --label=delay=0us --connections=1,2 --json=", a));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\nauto delay=0us        c=1 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  auto delay=0us        c=2 conn=2 OK"), std::string::npos) << r.output;
  r = RunLoadtest(absl::StrCat(run, " --label='delay=50us' --csv=", b_csv, " --json=", b));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines = absl::StrSplit(ReadFile(b_csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 4);
  EXPECT_TRUE(lines[4].starts_with("auto,closed,2,")) << lines[4];
  EXPECT_TRUE(absl::StrContains(lines[4], ",delay=50us,")) << lines[4];
  EXPECT_EQ(ParseReport(ReadFile(b)).rows(3).label(), "delay=50us");
  r = RunLoadtest(absl::StrCat(run, " --json=", c));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const std::string csv = dir_ / "m.csv", json = dir_ / "m.json", html = dir_ / "m.html";
  r = RunLoadtest(absl::StrCat("--merge_json=", a, ",", b, ",", c, " --csv=", csv, " --json=", json,
                               " --html=", html));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 runs merged: matmul 8x8x8 float32"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("warm-up"), std::string::npos) << "nothing runs: " << r.output;
  // The first column as wide as the longest name, "grpc_health delay=50us".
  EXPECT_NE(r.output.find("\nauto delay=50us        c=2 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nauto plain             c=1 "), std::string::npos) << r.output;
  // 8 rows of the first run (two connection counts), 4 of each other, in order.
  lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 8 + 4 + 4) << ReadFile(csv);
  EXPECT_TRUE(lines[1].starts_with("grpc_health,closed,1,")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[1], ",delay=0us,")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[9], ",delay=50us,")) << lines[9];
  EXPECT_TRUE(lines[16].starts_with("auto,closed,2,")) << lines[16];
  EXPECT_TRUE(absl::StrContains(lines[16], ",plain,")) << lines[16];
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  EXPECT_EQ(report.op(), "matmul");
  ASSERT_EQ(report.merged_from_size(), 3);
  EXPECT_EQ(report.merged_from(1), b);
  ASSERT_EQ(report.rows_size(), 16);
  EXPECT_EQ(report.rows(7).connections(), 2);
  EXPECT_EQ(report.rows(7).label(), "delay=0us");
  EXPECT_TRUE(report.rows(7).has_batch());
  EXPECT_GT(report.rows(15).requests(), 0);
  const std::string h = ReadFile(html);
  EXPECT_NE(h.find("Runs merged"), std::string::npos);
  for (const char* series :
       {"auto delay=0us conn=2", "auto delay=50us conn=1", "grpc_health plain conn=1"}) {
    EXPECT_NE(h.find(absl::StrCat(">", series, "</text>")), std::string::npos) << series;
  }

  // A merge of one file re-renders it; the rows keep their labels.
  r = RunLoadtest(absl::StrCat("--merge_json=", b, " --json=", json));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ParseReport(ReadFile(json)).rows_size(), 4);

  RunResult bad = RunLoadtest(absl::StrCat("--merge_json=", a, ",", missing));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find(absl::StrCat("--merge_json: cannot read ", missing)), std::string::npos)
      << bad.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=2x2 --concurrency=1 --json=", c));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  bad = RunLoadtest(absl::StrCat("--merge_json=", a, ",", c));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("measured transpose 2x2 float32, "), std::string::npos) << bad.output;
  bad = RunLoadtest(absl::StrCat("--merge_json=", a, " --label=x"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--label:"), std::string::npos) << bad.output;
}

// A script of the source tree's bench/, which the tests below run.
std::filesystem::path BenchScript(const char* name) {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "bench" / name;
}

// bench/batching_sweep.sh end to end on the CPU backend: a server per
// --batch_delay_us, a labelled run against each, all merged into one HTML.
TEST(LoadtestBatchingSweep, RunsEachDelayAndMergesTheRuns) {
  const std::filesystem::path script = BenchScript("batching_sweep.sh");
  if (!std::filesystem::exists(script)) GTEST_SKIP() << script << " not found";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / absl::StrCat("loadtest_batching_sweep_", getpid());
  const std::string binaries =
      absl::StrCat(script.string(), " ", GPUCOMPUTE_SERVER_PATH, " ", GPUCOMPUTE_LOADTEST_PATH, " ",
                   out.string(), " --backend=cpu");
  RunResult r = testing::RunCommand(absl::StrCat(
      "DELAYS='0 100' WARMUP=0.1s WINDOW=0.2s MAX_TIME=1s STABLE_WINDOWS=1 ", binaries));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 runs merged: matmul 64x64x64 float32"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\nauto delay=100us        c=64         8 "), std::string::npos)
      << r.output;
  // Each server ran with its delay.
  EXPECT_NE(ReadFile(out / "server_delay100.log").find("waiting up to 100 us for company"),
            std::string::npos);
  for (const char* delay : {"0", "100"}) {
    SCOPED_TRACE(delay);
    const tools::v1::LoadtestReport report =
        ParseReport(ReadFile(out / absl::StrCat("delay", delay, ".json")));
    ASSERT_EQ(report.rows_size(), 2 * 2 * 3);  // grpc_health and auto, 2 connections, 3 levels
    for (const auto& row : report.rows()) {
      EXPECT_EQ(row.label(), absl::StrCat("delay=", delay, "us"));
      EXPECT_GT(row.requests(), 0) << row.variant();
      if (row.variant() == "auto") {
        EXPECT_GE(row.batch(), 1);
      }
    }
  }
  const std::string h = ReadFile(out / "batching.html");
  for (const char* series :
       {"auto delay=0us conn=1", "auto delay=100us conn=8", "grpc_health delay=100us conn=1"}) {
    EXPECT_NE(h.find(absl::StrCat(">", series, "</text>")), std::string::npos) << series;
  }
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(out / "batching.csv"), '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 1u + 2 * 12);

  // A server that does not start: the script says so and fails.
  r = testing::RunCommand(absl::StrCat("DELAYS=0 ", binaries, " --no_such_flag"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--batch_delay_us=0 is not serving"), std::string::npos) << r.output;
  std::filesystem::remove_all(out);
}

// bench/host_cores.sh end to end on the CPU backend: each row's rate, the
// busy cores read from /proc, the mean latency and the server's part of it,
// over the connections and load threads asked for; and a server that does
// not start fails the script.
TEST(LoadtestHostCores, ReadsEachRowsCoresAndSaysWhenAServerDoesNotStart) {
  const std::filesystem::path script = BenchScript("host_cores.sh");
  if (!std::filesystem::exists(script)) GTEST_SKIP() << script << " not found";
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / absl::StrCat("loadtest_host_cores_", getpid());
  const std::string bin_dir =
      std::filesystem::path(GPUCOMPUTE_LOADTEST_PATH).parent_path().string();
  const std::string command =
      absl::StrCat("LISTEN=127.0.0.1:0 ROW_SECONDS=2 CONNECTIONS=3 LOAD_THREADS=3 ",
                   script.string(), " ", bin_dir, " ", out.string());
  RunResult r =
      testing::RunCommand(absl::StrCat(command, " cpu=", GPUCOMPUTE_SERVER_PATH, ":--backend=cpu"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at c=64 over 3 connections, 3 load threads"), std::string::npos)
      << r.output;
  EXPECT_NE(ReadFile((out / "cpu_matmul.log").string()).find("; 3 load threads"),
            std::string::npos);
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 11 || f[3] != "of") continue;
    SCOPED_TRACE(line);
    ++rows;
    // A rate in thousands, then busy cores: the host's, the server's, the
    // load test's. The echo's server is the load test itself.
    EXPECT_TRUE(absl::EndsWith(f[1], "k"));
    double rate = 0, host = 0, server = 0, load = 0;
    EXPECT_TRUE(absl::SimpleAtod(f[1].substr(0, f[1].size() - 1), &rate));
    EXPECT_TRUE(absl::SimpleAtod(f[2], &host));
    EXPECT_TRUE(absl::SimpleAtod(f[5], &server));
    EXPECT_TRUE(absl::SimpleAtod(f[6], &load));
    EXPECT_GT(rate, 0);
    EXPECT_GT(host, 0);
    EXPECT_GT(load, 0);
    if (f[0] == "echo") {
      EXPECT_LT(server, 0.1);
    } else {
      EXPECT_GT(server, 0);
    }
    // A call's mean latency; the server's part of it only where a server
    // reports one (not the floors), and never more than the whole.
    double mean = 0, in_server = 0;
    EXPECT_TRUE(absl::SimpleAtod(f[9], &mean));
    EXPECT_GT(mean, 0);
    if (f[0] == "health" || f[0] == "echo") {
      EXPECT_EQ(f[10], "-");
    } else {
      EXPECT_TRUE(absl::SimpleAtod(f[10], &in_server));
      EXPECT_LE(in_server, mean);
    }
  }
  EXPECT_EQ(rows, 5) << r.output;  // health, transpose, echo, matmul, kept

  r = testing::RunCommand(
      absl::StrCat(command, " 'bad=", GPUCOMPUTE_SERVER_PATH, ":--backend=cpu --no_such_flag'"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("host_cores.sh: bad is not serving"), std::string::npos) << r.output;
  std::filesystem::remove_all(out);
}

TEST_F(LoadtestBinaryTest, CountsErrorsByStatusCode) {
  const std::string csv = dir_ / "e.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=matmul --shape=512x512x512 --dtype=float64",
                                         " --concurrency=2 --deadline=1ms --csv=", csv));
  EXPECT_EQ(r.exit_code, 1) << r.output;  // not a single success
  EXPECT_NE(ReadFile(csv).find("DEADLINE_EXCEEDED:"), std::string::npos) << ReadFile(csv);
}

// A server that goes away mid-row: the closed loop pauses after each
// UNAVAILABLE instead of spinning, so the row counts a few hundred refusals
// at most, not hundreds of thousands.
TEST(LoadtestServerGone, UnavailableCallsAreRetriedAfterAPause) {
  testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--metrics_listen="});
  ASSERT_TRUE(server.started());
  const std::string json =
      (std::filesystem::temp_directory_path() / absl::StrCat("loadtest_gone_", getpid(), ".json"))
          .string();
  std::thread stopper([&server] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    server.Stop(SIGKILL);
  });
  RunResult r = RunLoadtest(
      absl::StrCat("--server=", server.target(), " --op=transpose --shape=8x8 --concurrency=2",
                   " --warmup=0.2s --window=0.5s --min_requests=5 --max_time=3s --json=", json));
  stopper.join();
  EXPECT_EQ(r.exit_code, 1) << r.output;  // errors in the measured windows
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  std::filesystem::remove(json);
  ASSERT_EQ(report.rows_size(), 1) << r.output;
  const auto& errors = report.rows(0).errors();
  ASSERT_TRUE(errors.contains("UNAVAILABLE")) << r.output;
  // 2 threads, 10 ms apart, for at most 3 s: about 600.
  EXPECT_LT(errors.at("UNAVAILABLE"), 2000) << r.output;
}

// --placement=inline,tensor: the same variant with and without the transfer,
// the tensor rows moving no matrix bytes and their kept outputs released.
TEST_F(LoadtestBinaryTest, TensorPlacementRowsBesideInline) {
  const std::string json = dir_ / "p.json";
  RunResult r =
      RunLoadtest(absl::StrCat(Fastest(), " --op=matmul --shape=24x16x8 --placement=inline,tensor",
                               " --concurrency=1,2 --json=", json));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("auto [tensor]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kept outputs released: "), std::string::npos) << r.output;
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  EXPECT_EQ(report.placement(), "inline,tensor");
  ASSERT_EQ(report.rows_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const auto& row = report.rows(i);
    EXPECT_EQ(row.variant(), "auto");
    EXPECT_EQ(row.placement(), i < 2 ? "inline" : "tensor");
    EXPECT_GT(row.requests(), 0);
    EXPECT_TRUE(row.errors().empty());
    if (i >= 2) {
      EXPECT_EQ(row.payload_bytes(), 0);
      EXPECT_EQ(row.server_us().upload(), 0);  // operands resident
    }
  }
  // Every kept output was released: the server holds nothing afterwards.
  RunResult none = RunLoadtest(
      absl::StrCat(Fast(), " --op=transpose --shape=9x7 --placement=tensor", " --concurrency=1"));
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_EQ(none.output.find("not held any more"), std::string::npos) << none.output;
}

// --baseline=service: ListTensors, the Compute service's own no-work call,
// beside gRPC's health Check; neither moves payload or has a server report,
// and neither is counted among the answered compute requests.
TEST_F(LoadtestBinaryTest, ServiceBaselineBesideTheHealthCheck) {
  const std::string csv = dir_ / "s.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fastest(), " --op=transpose --shape=3x2",
                                         " --baseline=grpc,service --concurrency=1,2 --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 6) << ReadFile(csv);
  EXPECT_TRUE(lines[1].starts_with("grpc_health,closed,1,"));
  EXPECT_TRUE(lines[3].starts_with("list_tensors,closed,1,"));
  EXPECT_TRUE(lines[4].starts_with("list_tensors,closed,2,"));
  for (int i : {3, 4}) {
    EXPECT_EQ(CsvCell(lines[0], lines[i], "payload_bytes"), "0") << lines[i];
    EXPECT_GT(std::stod(CsvCell(lines[0], lines[i], "requests_per_s")), 0.0) << lines[i];
    EXPECT_EQ(CsvCell(lines[0], lines[i], "server_queue_us"), "") << lines[i];
  }
  EXPECT_EQ(r.output.find("list_tensors     c=1      OK"), std::string::npos)
      << "ListTensors calls are not compute requests";
}

// --baseline=echo: grpc_echo rows at each concurrency and connection count,
// carrying the op's payload; the echo server received the op's encoded
// request and sent its response back, and the inline rows (only they) carry
// their throughput over the echo's.
TEST_F(LoadtestBinaryTest, GrpcEchoCarriesTheOpsBytes) {
  const std::string csv = dir_ / "e.csv";
  RunResult r = RunLoadtest(absl::StrCat(Fastest(), " --op=matmul --shape=16x8x4",
                                         " --placement=inline,tensor --baseline=echo",
                                         " --concurrency=2 --connections=1,2 --csv=", csv));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // "... request (N bytes, variant auto, inline) ... encoded it (M bytes)"
  // and "grpc_echo server: C calls answered, N request bytes and M response
  // bytes each".
  const int64_t sent_request = NumberAfter(r.output, "'s request (");
  const int64_t sent_response = NumberAfter(r.output, "encoded it (");
  const size_t echo_line = r.output.find("grpc_echo server: ");
  ASSERT_NE(echo_line, std::string::npos) << r.output;
  const std::string echo = r.output.substr(echo_line);
  EXPECT_GT(NumberAfter(echo, "grpc_echo server: "), 0) << echo;
  EXPECT_EQ(NumberAfter(echo, "calls answered, "), sent_request) << r.output;
  EXPECT_EQ(NumberAfter(echo, "request bytes and "), sent_response) << r.output;
  // The matrices (16x8 and 8x4 in, 16x4 out, float32) and a little framing.
  const int64_t request_bytes = sent_request, response_bytes = sent_response;
  EXPECT_GT(request_bytes, (16 * 8 + 8 * 4) * 4);
  EXPECT_LT(request_bytes, (16 * 8 + 8 * 4) * 4 + 64);
  EXPECT_GT(response_bytes, 16 * 4 * 4);
  EXPECT_LT(response_bytes, 16 * 4 * 4 + 256);

  // grpc_echo at 1 and 2 connections, then auto inline and tensor at each.
  std::vector<std::string> lines = absl::StrSplit(ReadFile(csv), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u + 6) << ReadFile(csv);
  const std::string payload = absl::StrCat((16 * 8 + 8 * 4 + 16 * 4) * 4);
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string variant = CsvCell(lines[0], lines[i], "variant");
    const std::string placement = CsvCell(lines[0], lines[i], "placement");
    EXPECT_GT(std::stod(CsvCell(lines[0], lines[i], "requests_per_s")), 0.0) << lines[i];
    EXPECT_EQ(CsvCell(lines[0], lines[i], "errors"), "") << lines[i];
    if (variant == "grpc_echo") {
      EXPECT_LE(i, 2u) << "the baseline runs first: " << lines[i];
      EXPECT_EQ(CsvCell(lines[0], lines[i], "connections"), i == 1 ? "1" : "2");
      EXPECT_EQ(CsvCell(lines[0], lines[i], "payload_bytes"), payload) << lines[i];
      EXPECT_EQ(CsvCell(lines[0], lines[i], "server_total_us"), "") << lines[i];
    }
    const bool compared = variant == "auto" && placement == "inline";
    EXPECT_EQ(CsvCell(lines[0], lines[i], "vs_grpc_echo").empty(), !compared) << lines[i];
  }
  EXPECT_NE(r.output.find("xEcho)"), std::string::npos) << r.output;

  r = RunLoadtest(absl::StrCat(Fast(), " --op=upload --shape=8x8 --baseline=echo"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--baseline=echo: compute ops only"), std::string::npos) << r.output;
}

// --busy_poll: the same closed-loop rows from threads that poll their
// completion queues, baseline included, and the report says so.
TEST_F(LoadtestBinaryTest, BusyPollingClientAnswersTheSameRows) {
  const std::string json = dir_ / "b.json";
  RunResult r = RunLoadtest(absl::StrCat(Fastest(), " --op=matmul --shape=24x16x8 --busy_poll",
                                         " --placement=inline,tensor --baseline=grpc",
                                         " --concurrency=1,3 --json=", json));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  EXPECT_NE(report.settings().find("busy-polling client"), std::string::npos) << report.settings();
  ASSERT_EQ(report.rows_size(), 6);  // grpc_health, inline and tensor, each at c=1 and c=3
  for (const auto& row : report.rows()) {
    EXPECT_GT(row.requests(), 0) << row.variant();
    EXPECT_TRUE(row.errors().empty()) << row.variant();
  }
}

// --load_threads: one thread issues every call of a closed-loop row on its
// one channel, so the server sees every MatMul come from one peer, where
// the default (a thread per core, at least one per channel) uses all three
// connections; the report names the count, and a count out of range is
// refused naming the flag.
TEST(LoadtestLoadThreads, OneThreadIssuesEveryCallOnOneConnection) {
  const std::string log =
      (std::filesystem::temp_directory_path() / absl::StrCat("loadtest_access_", getpid(), ".log"))
          .string();
  testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                                {"--backend=cpu", "--metrics_listen=", "--access_log=" + log});
  ASSERT_TRUE(server.started());
  size_t read_up_to = 0;
  // The peers of the MatMuls logged since the last look.
  auto matmul_peers = [&] {
    const std::string text = ReadFile(log);
    std::set<std::string> peers;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(text).substr(read_up_to), '\n', absl::SkipEmpty())) {
      const std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 2 && f[2] == "matmul") peers.insert(std::string(f[1]));
    }
    read_up_to = text.size();
    return peers;
  };
  const std::string row = absl::StrCat(
      "--server=", server.target(),
      " --op=matmul --shape=8x8x8 --concurrency=6 --connections=3 --warmup=0.1s --window=0.3s",
      " --min_requests=5 --stable_windows=1 --max_time=2s --progress=never");
  RunResult r = RunLoadtest(absl::StrCat(row, " --load_threads=1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("; 1 load thread"), std::string::npos) << r.output;
  EXPECT_EQ(matmul_peers().size(), 1u) << ReadFile(log);

  r = RunLoadtest(row);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("load thread"), std::string::npos) << r.output;
  EXPECT_EQ(matmul_peers().size(), 3u) << ReadFile(log);

  r = RunLoadtest(absl::StrCat(row, " --load_threads=5000"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--load_threads: must be 0 to 4096, got 5000"), std::string::npos)
      << r.output;
  std::filesystem::remove(log);
}

// --placement=shm: operands and output in one registered region, beside
// inline; the region is unregistered (and unlinked) at the end.
TEST_F(LoadtestBinaryTest, SharedMemoryPlacementRowsBesideInline) {
  const std::string json = dir_ / "s.json";
  RunResult r =
      RunLoadtest(absl::StrCat(Fastest(), " --op=transpose --shape=33x17 --placement=inline,shm",
                               " --concurrency=1,2 --json=", json));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("auto [shm]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not pinned (CPU server)"), std::string::npos) << r.output;
  const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
  ASSERT_EQ(report.rows_size(), 4);
  for (int i = 0; i < 4; ++i) {
    const auto& row = report.rows(i);
    EXPECT_EQ(row.placement(), i < 2 ? "inline" : "shm");
    EXPECT_GT(row.requests(), 0);
    EXPECT_TRUE(row.errors().empty());
    EXPECT_EQ(row.payload_bytes(), 2 * 33 * 17 * 4);  // moved through the region
  }
  auto stub = gpucompute::v1::Compute::NewStub(
      grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  gpucompute::v1::ListSharedMemoryResponse list;
  ASSERT_TRUE(stub->ListSharedMemory(&ctx, {}, &list).ok());
  EXPECT_EQ(list.regions_size(), 0);
}

// --op=upload|download: stream rows in bytes per second beside the TCP echo.
TEST_F(LoadtestBinaryTest, UploadAndDownloadRowsBesideTcp) {
  for (const char* op : {"upload", "download"}) {
    SCOPED_TRACE(op);
    const std::string json = dir_ / absl::StrCat(op, ".json");
    RunResult r = RunLoadtest(
        absl::StrCat(Fastest(), " --op=", op, " --shape=300x257 --concurrency=1,2 --json=", json));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const tools::v1::LoadtestReport report = ParseReport(ReadFile(json));
    EXPECT_EQ(report.op(), op);
    ASSERT_EQ(report.rows_size(), 4);  // tcp_echo at 1 and 2, then the stream rows
    const double bytes = 300 * 257 * 4;
    EXPECT_EQ(report.request_payload_bytes(), std::string(op) == "upload" ? bytes : 0);
    for (int i = 0; i < 4; ++i) {
      const auto& row = report.rows(i);
      EXPECT_EQ(row.variant(), i < 2 ? "tcp_echo" : op);
      EXPECT_GT(row.requests(), 0) << row.variant();
      EXPECT_EQ(row.payload_bytes(), bytes);
      EXPECT_GT(row.gbytes_per_s(), 0);
      EXPECT_EQ(row.connections(), i < 2 ? 0 : 1);  // a stream uses the first channel
      if (i >= 2) {
        EXPECT_TRUE(row.has_vs_tcp());
      }
    }
  }
  RunResult bad = RunLoadtest(absl::StrCat(Fast(), " --op=upload --placement=tensor"));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  RunResult bad_op = RunLoadtest(absl::StrCat(Fast(), " --op=fft"));
  EXPECT_EQ(bad_op.exit_code, 2);
  EXPECT_NE(bad_op.output.find("upload or download"), std::string::npos) << bad_op.output;
}

TEST_F(LoadtestBinaryTest, RejectsUnknownVariantsAndBadShapes) {
  RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=8x8 --variants=nope"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("cpu_reference"), std::string::npos) << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=matmul --shape=8x8"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--shape: expected 3 dimensions (MxKxN, e.g. 512x256x128), got '8x8'"),
            std::string::npos)
      << r.output;
  r = RunLoadtest(absl::StrCat(Fast(), " --op=reduce --shape=8x8 --axis=diagonal"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--axis: expected all, per_row or per_column, got 'diagonal'"),
            std::string::npos)
      << r.output;
}

// Every bound of a flag, and a shape the server would refuse, stop the run
// before it measures anything: exit 2 and a message naming the flag and
// the numbers, where a value past them had crashed (a shape too large to
// allocate), hung (a rate too low to end a row) or measured nonsense (nan).
TEST_F(LoadtestBinaryTest, AValuePastAFlagsBoundStopsTheRunNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--shape=100000000x100000000", "--shape: a 100000000x100000000 float32 matrix is too large"},
      {"--shape=20000x20000",
       "--shape: the input, 20000x20000 float32, is 1600000000 bytes, above the server's "
       "max_matrix_bytes of"},
      {"--shape=8x8 --rate=nan", "--rate: \"nan\" is not a positive decimal number"},
      {"--shape=8x8 --rate=inf", "--rate: \"inf\" is not a positive decimal number"},
      {"--shape=8x8 --concurrency=,", "--concurrency: \",\" names no value"},
      {"--shape=8x8 --concurrency=99999999999",
       "--concurrency: \"99999999999\" is not a whole number from 1 to 2147483647"},
      {"--shape=8x8 --max_time=0", "--max_time: must be above 0 and at most 24h, got 0"},
      {"--shape=8x8 --warmup=5s", "--warmup: must be 0 or more and less than --max_time (3s)"},
      {"--shape=8x8 --window=-1s", "--window: must be above 0"},
      {"--shape=8x8 --deadline=0", "--deadline: must be above 0 and at most 24h, got 0"},
      {"--shape=8x8 --min_requests=0", "--min_requests: must be 1 or more, got 0"},
      {"--shape=8x8 --stable_windows=0", "--stable_windows: must be 1 to"},
      {"--shape=8x8 --stability=nan", "--stability: must be above 0 and at most 1, got nan"},
      {"--shape=8x8 --rate=100 --max_outstanding=0", "--max_outstanding: must be 1 to"},
      {"--shape=8x8 --lb=fastest", "--lb: must be empty, pick_first or round_robin"},
      {"--shape=8x8 stray", "unexpected argument 'stray'"},
      {"--shape=8x8 --csv=/nonexistent-folder/rows.csv",
       "--csv: cannot write /nonexistent-folder/rows.csv"},
  };
  for (const auto& [flags, message] : cases) {
    const RunResult r = RunLoadtest(absl::StrCat(Fast(), " --op=transpose ", flags));
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
  }
  const RunResult port = RunLoadtest("--server=127.0.0.1:99999 --op=transpose --shape=8x8");
  EXPECT_EQ(port.exit_code, 2) << port.output;
  EXPECT_NE(port.output.find("server address \"127.0.0.1:99999\" is not HOST:PORT"),
            std::string::npos)
      << port.output;
}

// An open-loop rate whose next arrival lies past --max_time still ends
// its row at --max_time (it used to sleep until that arrival).
TEST_F(LoadtestBinaryTest, ALowRateStillEndsItsRowOnTime) {
  const auto start = std::chrono::steady_clock::now();
  const RunResult r =
      RunLoadtest(absl::StrCat(Fast(), " --op=transpose --shape=8x8 --rate=0.001 --max_time=1s"));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20) << r.output;
  EXPECT_NE(r.output.find("r=0.001/s"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpucompute::loadtest
