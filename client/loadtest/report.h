// Rows of a load test and their renderings: a terminal table, CSV, JSON and
// a self-contained HTML report with latency-vs-throughput curves.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpucompute/tools/v1/loadtest_report.pb.h"
#include "loadtest/load.h"

namespace gpucompute::loadtest {

// Reference rows measured beside the variants.
inline constexpr const char* kTcpEcho = "tcp_echo";        // the payload over plain TCP
inline constexpr const char* kUnixEcho = "unix_echo";      // ... over a unix socket
inline constexpr const char* kGrpcHealth = "grpc_health";  // a gRPC call doing no work
// A call of the Compute service itself that touches no device: ListTensors.
inline constexpr const char* kServiceCall = "list_tensors";
// The op's own request and response through a gRPC server that does no work
// (grpc_echo.h): the payload-matched floor of the inline rows.
inline constexpr const char* kGrpcEcho = "grpc_echo";
// The echo over a plain socket, without gRPC.
inline bool IsSocketEcho(const std::string& variant) {
  return variant == kTcpEcho || variant == kUnixEcho;
}
inline bool IsBaseline(const std::string& variant) {
  return IsSocketEcho(variant) || variant == kGrpcHealth || variant == kServiceCall ||
         variant == kGrpcEcho;
}

struct Row {
  std::string variant;        // kernel variant, or one of the baselines above
  std::string mode;           // "closed" (fixed concurrency) or "open" (Poisson rate)
  int concurrency = 0;        // closed loop
  double rate = 0;            // open loop: target arrivals per second
  int64_t payload_bytes = 0;  // per request, request and response matrices together

  int64_t requests = 0;  // successful, in the measured windows
  double seconds = 0;    // length of the measured windows
  double requests_per_s = 0;
  double gbytes_per_s = 0;  // payload both ways
  double avg_us = 0, p50_us = 0, p90_us = 0, p95_us = 0, p99_us = 0, max_us = 0;
  bool has_server_report = false;
  // Server's ExecutionReport averages; client_other_us = avg_us - server_total_us:
  // transport, serialization and client work.
  double queue_us = 0, upload_us = 0, compute_us = 0, download_us = 0, server_total_us = 0;
  double client_other_us = 0;
  // Mean ExecutionReport.batch_size (0 read as 1): how many requests ran as
  // one batch with each of the row's; with the server report only.
  double batch = 0;
  // Means over the answers whose report says when the server took the
  // request: the way in (sent -> taken) and the way out (the server's total
  // past that -> answered), on the two hosts' wall clocks (meaningful on one
  // host); has_ways false: no such report.
  bool has_ways = false;
  double way_in_us = 0, way_out_us = 0;
  std::map<std::string, int64_t> errors;
  int64_t dropped = 0;
  // All answers of the row, warm-up included (compare with server metrics).
  int64_t answered_ok = 0;
  std::map<std::string, int64_t> answered_errors;
  int windows = 0;
  bool stable = false;
  double vs_tcp = 0;  // gbytes_per_s / the echo's (TCP or unix) at the same concurrency; 0: none
  // Inline rows: requests_per_s / grpc_echo's at the same concurrency and
  // connections, the share of gRPC's throughput for the same bytes; 0: none.
  double vs_grpc_echo = 0;
  std::string placement = "inline";  // or "tensor": operands held, outputs kept
  // gRPC channels, each with its own connection, that the row's requests were
  // spread over (--connections); 0: none, the echo baselines (one socket per
  // request in flight), or a --json written before the field.
  int connections = 0;
  // --label: free text naming the run's configuration, e.g. "delay=100us"; "": none.
  std::string label;

  // The variant as tables and charts name the row: "auto", "auto [tensor]",
  // or with a --label "auto [tensor] delay=100us".
  std::string Label() const;

  std::string LoadText() const;         // "c=16" or "r=200/s"
  std::string ConnectionsText() const;  // "8", or "-" for 0
  std::string ErrorsText() const;       // "UNAVAILABLE:3 DEADLINE_EXCEEDED:1" or "0"
};

Row MakeRow(std::string variant, std::string mode, int concurrency, double rate,
            int64_t payload_bytes, const Measurement& m);

struct RunInfo {
  std::string server;
  std::string server_version;
  std::string backend;
  std::vector<std::string> devices;
  std::string op, dtype, shape, shape_meaning, reduce;  // reduce: "sum per_row" or ""
  int64_t request_payload_bytes = 0, response_payload_bytes = 0;
  std::string started;               // RFC 3339
  std::string settings;              // the measurement settings in words
  std::string placement = "inline";  // --placement, e.g. "inline,tensor"
  // --merge_json: the runs read, in order (empty for a run measured here).
  struct Source {
    std::string file;
    std::string labels;  // their rows' labels, comma-separated
    std::string server, server_version, backend, started, settings;
  };
  std::vector<Source> merged;
};

// A run as --json writes it, read back.
struct RunReport {
  RunInfo info;
  std::vector<Row> rows;
};
// Reads a --json report (keys it does not know are skipped).
absl::StatusOr<RunReport> FromJson(const std::string& json);
// Earlier runs of one workload (op, dtype, shape, reduce) as one: their rows
// in order, each run's info under RunInfo::merged. With several files, rows
// without a label take their file's name (its stem, or the path as given
// when two stems agree), so that the runs' series stay apart.
absl::StatusOr<RunReport> MergeRuns(const std::vector<std::string>& files,
                                    std::vector<RunReport> runs);

// Whether the rows ran at more than one --connections value: labels then
// name each row's count.
bool SeveralConnections(const std::vector<Row>& rows);

// The width of the table's first column: 16, or the longest label when
// rows carry a --label.
int LabelWidth(const std::vector<Row>& rows);

// The table: a header line, then one aligned line per row.
std::string FormatTableHeader(int label_width = 16);
std::string FormatTableRow(const Row& row, int label_width = 16);
// The rows' way in, time in the server and way out, a line each for rows
// with has_ways ("" when none has), after the table.
std::string FormatWays(const std::vector<Row>& rows, int label_width = 16);

std::string ToCsv(const std::vector<Row>& rows);
// The run as the message --json prints (proto/gpucompute/tools/v1/loadtest_report.proto).
tools::v1::LoadtestReport ToReport(const RunInfo& info, const std::vector<Row>& rows);
absl::StatusOr<std::string> ToJson(const RunInfo& info, const std::vector<Row>& rows);
std::string ToHtml(const RunInfo& info, const std::vector<Row>& rows);

// "85 us", "1.23 ms", "2.50 s".
std::string FormatMicros(double us);

}  // namespace gpucompute::loadtest
