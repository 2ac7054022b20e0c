// gpucompute-loadtest: runs one workload against a gpucompute server once per
// kernel variant, under closed-loop concurrency sweeps and open-loop Poisson
// rates, and reports throughput, latency percentiles, errors and the server's
// own time breakdown next to the client-seen latency.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gpucompute/client.h"
#include "gpucompute/host_memory.h"
#include "loadtest/grpc_echo.h"
#include "loadtest/load.h"
#include "loadtest/report.h"
#include "loadtest/tcp_echo.h"

ABSL_FLAG(std::string, server, "localhost:50051",
          "server address: host:port, unix:/path/to/socket, or any gRPC target (e.g. "
          "dns:///name:port)");
ABSL_FLAG(std::string, op, "matmul",
          "matmul, transpose or reduce; or upload / download: Upload and Download streams of "
          "an MxN --shape (default 4096x4096), one tensor per request, rows in bytes per second "
          "beside the TCP echo (--baseline defaults to tcp)");
ABSL_FLAG(std::string, placement, "inline",
          "where the matrices are, comma-separated: inline (sent and returned in every "
          "request), tensor (operands uploaded once and named by id, outputs kept on the "
          "server and released: no matrix bytes move), shm (operands and output in a "
          "shared-memory region registered with a server on this host that runs with "
          "--allow_shared_memory: no matrix bytes on the socket), or several, e.g. "
          "inline,tensor,shm to compare them");
ABSL_FLAG(std::string, shape, "1024x1024x1024",
          "matmul: MxKxN, a is M x K times b K x N (result M x N), as the gpucompute CLI "
          "takes it; transpose/reduce: MxN");
ABSL_FLAG(std::string, dtype, "float32", "float32 or float64");
ABSL_FLAG(std::string, axis, "all", "reduce: all, per_row or per_column");
ABSL_FLAG(std::string, reduce_op, "sum", "reduce: sum, min, max or mean");
ABSL_FLAG(std::string, variants, "auto",
          "comma-separated variant names (auto: the server chooses), or all: auto and every "
          "variant of the op that GetServerInfo lists for the dtype");
ABSL_FLAG(bool, allow_tf32, false, "let auto pick reduced-precision variants");
ABSL_FLAG(std::string, concurrency, "",
          "closed loop: comma-separated requests in flight, e.g. 1,4,16,64 (default 1,4,16 "
          "unless --rate is given)");
ABSL_FLAG(std::string, rate, "",
          "open loop: comma-separated Poisson arrival rates in requests/s, e.g. 100,500");
ABSL_FLAG(int32_t, max_outstanding, 1024,
          "open loop: requests in flight at most; arrivals beyond are counted as dropped");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1), "warm-up per row, not measured");
ABSL_FLAG(absl::Duration, window, absl::Seconds(1), "length of one measurement window");
ABSL_FLAG(int32_t, min_requests, 20, "a window lasts until it has at least this many completions");
ABSL_FLAG(int32_t, stable_windows, 3,
          "consecutive windows whose throughput and p95 must agree; the row reports them merged");
ABSL_FLAG(double, stability, 0.10, "agreement: each within this fraction of their mean");
ABSL_FLAG(absl::Duration, max_time, absl::Seconds(30),
          "time limit per row, warm-up included; an unstable row is reported as such");
ABSL_FLAG(absl::Duration, deadline, absl::Seconds(60), "deadline of each request");
ABSL_FLAG(std::string, baseline, "",
          "reference rows run before the variants, at each concurrency (comma-separated): "
          "tcp echoes the same payload over a loopback TCP socket, the transport ceiling "
          "(meaningful when the server runs on this host; against a unix: target the echo "
          "runs over a unix socket instead, row unix_echo, so that both cross the same kind "
          "of socket); grpc sends the standard health "
          "Check to the server over the same channel, the round trip of a gRPC call that "
          "does no work; service sends ListTensors (row list_tensors), a call of the Compute "
          "service itself that touches no device: what the service's own handling adds to "
          "the health Check; echo (row grpc_echo, compute ops) sends the first variant's "
          "inline request to a gRPC server that this process starts on loopback (a unix "
          "socket against a unix: target), plaintext, which answers every call with a copy "
          "of the op's response as the server encoded it: gRPC carrying the op's bytes both "
          "ways with no work behind it, over the same --connections; xEcho gives an inline "
          "row's req/s over it at the same concurrency and connections");
ABSL_FLAG(std::string, label, "",
          "free text added to every row, e.g. delay=100us: in its name in the table and the "
          "HTML (\"auto delay=100us\"), and as label in the CSV and JSON; names the server's "
          "configuration when runs are merged with --merge_json");
ABSL_FLAG(std::string, merge_json, "",
          "comma-separated --json files of earlier runs of one workload (e.g. against "
          "differently configured servers): instead of running, render their rows together "
          "into the table and --csv, --json and --html; with several files, rows without a "
          "--label take their file's name");
ABSL_FLAG(std::string, csv, "", "write the rows as CSV to this file");
ABSL_FLAG(std::string, json, "", "write the run and its rows as JSON to this file");
ABSL_FLAG(std::string, html, "",
          "write a self-contained HTML report (latency-vs-throughput curves per variant)");
ABSL_FLAG(std::string, progress, "auto",
          "progress bar on stderr: auto (when a terminal), always, never");
ABSL_FLAG(uint64_t, seed, 1, "seed of the random input matrices and open-loop arrivals");
ABSL_FLAG(std::string, tls_ca, "", "PEM root CA; turns TLS on");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate for mutual TLS (with --tls_key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "name to check in the server certificate; turns TLS on");
ABSL_FLAG(bool, tls, false, "use TLS with the system's root CAs");
ABSL_FLAG(std::string, token_file, "",
          "send the file's content as 'authorization: Bearer <token>'");
ABSL_FLAG(bool, grpc_defaults, false,
          "use gRPC's stock frame, window and read sizes instead of those for large messages "
          "(to measure what the tuning buys)");
ABSL_FLAG(bool, busy_poll, false,
          "closed loop (--concurrency): each load thread polls its completion queue without "
          "sleeping while its calls are in flight (one busy core per thread), so the latency "
          "rows leave out the client's own wake-up; compare rows with and without");
ABSL_FLAG(std::string, lb, "",
          "round_robin: spread requests over every address a dns:/// target resolves to");
ABSL_FLAG(std::string, connections, "1",
          "gRPC channels, each with its own TCP connection, that the requests are spread "
          "over (one HTTP/2 connection is read by one thread at a time on each side); "
          "comma-separated, e.g. 1,8, runs each variant's (and the grpc baseline's) sweep once "
          "per value, rows in the conn column (upload and download stream over one)");

namespace gpucompute::loadtest {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "gpucompute-loadtest: %s\n", message.c_str());
  return 2;
}

// The value of --flag read by `parse` (one of the client library's Parse*
// functions); errors name the flag: "--axis: expected all, per_row or
// per_column, got 'rows'".
template <typename T>
absl::StatusOr<T> ParseFlag(const char* flag, const std::string& value,
                            const std::function<absl::StatusOr<T>(absl::string_view)>& parse) {
  absl::StatusOr<T> parsed = parse(value);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", parsed.status().message()));
  }
  return parsed;
}

template <typename T>
absl::StatusOr<std::vector<T>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<T> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    bool ok;
    if constexpr (std::is_same_v<T, int>) {
      ok = absl::SimpleAtoi(part, &v);
    } else {
      ok = absl::SimpleAtod(part, &v);
    }
    if (!ok || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", std::string(part), "\" is not a positive number"));
    }
    values.push_back(v);
  }
  return values;
}

absl::StatusOr<Workload> WorkloadFromFlags() {
  Workload w;
  const std::string op_flag = absl::GetFlag(FLAGS_op);
  std::string shape_flag = absl::GetFlag(FLAGS_shape);
  if (op_flag == "upload" || op_flag == "download") {
    w.transfer = op_flag == "upload" ? Transfer::kUpload : Transfer::kDownload;
    w.op = v1::OP_TRANSPOSE;                                       // an MxN matrix
    if (shape_flag == "1024x1024x1024") shape_flag = "4096x4096";  // the matmul default
  } else {
    absl::StatusOr<v1::Op> op = ParseFlag<v1::Op>("op", op_flag, [](absl::string_view name) {
      absl::StatusOr<v1::Op> parsed = ParseOp(name);
      if (!parsed.ok()) {
        return absl::StatusOr<v1::Op>(absl::InvalidArgumentError(absl::StrCat(
            "expected matmul, transpose, reduce, upload or download, got '", name, "'")));
      }
      return parsed;
    });
    if (!op.ok()) return op.status();
    w.op = *op;
  }
  absl::StatusOr<DType> dtype =
      ParseFlag<DType>("dtype", absl::GetFlag(FLAGS_dtype),
                       [](absl::string_view name) { return ParseDType(std::string(name)); });
  if (!dtype.ok()) return dtype.status();
  w.dtype = *dtype;
  absl::StatusOr<OpShape> shape = ParseFlag<OpShape>(
      "shape", shape_flag, [&w](absl::string_view text) { return ParseShape(w.op, text); });
  if (!shape.ok()) return shape.status();
  w.m = shape->m;
  w.n = shape->n;
  w.k = shape->k;
  absl::StatusOr<v1::ReduceAxis> axis =
      ParseFlag<v1::ReduceAxis>("axis", absl::GetFlag(FLAGS_axis), ParseReduceAxis);
  if (!axis.ok()) return axis.status();
  w.axis = *axis;
  absl::StatusOr<v1::ReduceOp> reduce_op =
      ParseFlag<v1::ReduceOp>("reduce_op", absl::GetFlag(FLAGS_reduce_op), ParseReduceOp);
  if (!reduce_op.ok()) return reduce_op.status();
  w.reduce_op = *reduce_op;
  w.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  w.seed = absl::GetFlag(FLAGS_seed);
  return w;
}

// "all" expands to auto plus the server's variants of the op for the dtype;
// named variants are checked against the server's list.
absl::StatusOr<std::vector<std::string>> ResolveVariants(const std::string& flag,
                                                         const v1::ServerInfo& info,
                                                         const Workload& w) {
  const v1::DType dtype = ToProto(w.dtype);
  std::vector<std::string> available;
  for (const v1::VariantInfo& v : info.variants()) {
    if (v.op() != w.op) continue;
    for (int d : v.dtypes()) {
      if (d == dtype) available.push_back(v.name());
    }
  }
  if (flag == "all") {
    std::vector<std::string> all = {"auto"};
    all.insert(all.end(), available.begin(), available.end());
    return all;
  }
  std::vector<std::string> chosen;
  for (absl::string_view name : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    const std::string n(name);
    if (n != "auto" && std::find(available.begin(), available.end(), n) == available.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--variants: the server has no ", OpName(w.op), " variant \"", n, "\" for ",
                       DTypeName(w.dtype), "; it has: auto, ", absl::StrJoin(available, ", ")));
    }
    chosen.push_back(n);
  }
  if (chosen.empty()) return absl::InvalidArgumentError("--variants: name at least one variant");
  return chosen;
}

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}

  void Show(int row, int rows, const std::string& what, absl::Duration elapsed,
            absl::Duration limit, int windows, const WindowStats* last) {
    if (!enabled_) return;
    constexpr int kWidth = 24;
    const double done = (row + std::min(1.0, absl::FDivDuration(elapsed, limit))) / rows;
    const int filled = static_cast<int>(done * kWidth);
    std::string bar = std::string(filled, '=') + (filled < kWidth ? ">" : "") +
                      std::string(std::max(0, kWidth - filled - 1), ' ');
    std::string status = absl::StrFormat("warm-up %.0fs", absl::ToDoubleSeconds(elapsed));
    if (last != nullptr) {
      status = absl::StrFormat("window %d: %.1f req/s, p95 %s", windows, last->Throughput(),
                               FormatMicros(last->Percentile(95) / 1000.0));
    } else if (windows > 0) {
      status = absl::StrFormat("window %d", windows + 1);
    }
    std::fprintf(stderr, "\r\033[K[%s] %d/%d %s  %s", bar.c_str(), row + 1, rows, what.c_str(),
                 status.c_str());
    std::fflush(stderr);
  }

  void Clear() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool enabled_;
};

std::string NowRfc3339() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%S%Ez", absl::Now(), absl::LocalTimeZone());
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

struct Plan {
  std::string variant;  // or a baseline (report.h); or "upload", "download"
  int concurrency = 0;
  double rate = 0;
  std::string placement = "inline";
  int connections = 0;  // the client whose channels carry the row; 0: the echo
};

const char* TransferName(Transfer t) { return t == Transfer::kUpload ? "upload" : "download"; }

// --csv, --json and --html, each when given.
absl::Status WriteReports(const RunInfo& run, const std::vector<Row>& rows) {
  for (const auto& [flag, render] :
       std::vector<std::pair<std::string, std::function<absl::StatusOr<std::string>()>>>{
           {absl::GetFlag(FLAGS_csv), [&] { return ToCsv(rows); }},
           {absl::GetFlag(FLAGS_json), [&] { return ToJson(run, rows); }},
           {absl::GetFlag(FLAGS_html), [&] { return ToHtml(run, rows); }}}) {
    if (flag.empty()) continue;
    absl::StatusOr<std::string> contents = render();
    if (!contents.ok()) return contents.status();
    if (absl::Status st = WriteFile(flag, *contents); !st.ok()) return st;
    std::printf("wrote %s\n", flag.c_str());
  }
  return absl::OkStatus();
}

// --merge_json: earlier runs' rows rendered together; nothing is measured.
int Merge() {
  if (!absl::GetFlag(FLAGS_label).empty()) {
    return Fail(
        "--label: tags the rows of a run; --merge_json keeps the labels the runs were given");
  }
  const std::vector<std::string> files =
      absl::StrSplit(absl::GetFlag(FLAGS_merge_json), ',', absl::SkipEmpty());
  std::vector<RunReport> runs;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in) return Fail(absl::StrCat("--merge_json: cannot read ", file));
    absl::StatusOr<RunReport> run = FromJson(contents.str());
    if (!run.ok()) return Fail(absl::StrCat("--merge_json: ", file, ": ", run.status().message()));
    runs.push_back(std::move(*run));
  }
  absl::StatusOr<RunReport> merged = MergeRuns(files, std::move(runs));
  if (!merged.ok()) return Fail(std::string(merged.status().message()));
  const RunInfo& run = merged->info;
  std::printf(
      "gpucompute-loadtest: %zu run%s merged: %s %s %s (%s%s) against %s (%s, %s backend)\n\n",
      files.size(), files.size() == 1 ? "" : "s", run.op.c_str(), run.shape.c_str(),
      run.dtype.c_str(), run.shape_meaning.c_str(),
      run.reduce.empty() ? "" : (", " + run.reduce).c_str(), run.server.c_str(),
      run.server_version.c_str(), run.backend.c_str());
  const int width = LabelWidth(merged->rows);
  std::printf("%s\n", FormatTableHeader(width).c_str());
  for (const Row& row : merged->rows) std::printf("%s\n", FormatTableRow(row, width).c_str());
  std::printf("\n");
  if (absl::Status st = WriteReports(run, merged->rows); !st.ok()) {
    return Fail(std::string(st.message()));
  }
  return 0;
}

int Run() {
  if (!absl::GetFlag(FLAGS_merge_json).empty()) return Merge();
  const std::string label = absl::GetFlag(FLAGS_label);
  if (label.find_first_of("\r\n") != std::string::npos) {
    return Fail("--label: one line of text, without line breaks");
  }
  auto workload = WorkloadFromFlags();
  if (!workload.ok()) return Fail(std::string(workload.status().message()));
  const Workload& w = *workload;

  auto rates = ParseList<double>("rate", absl::GetFlag(FLAGS_rate));
  if (!rates.ok()) return Fail(std::string(rates.status().message()));
  std::string concurrency_text = absl::GetFlag(FLAGS_concurrency);
  if (concurrency_text.empty() && rates->empty()) concurrency_text = "1,4,16";
  auto levels = ParseList<int>("concurrency", concurrency_text);
  if (!levels.ok()) return Fail(std::string(levels.status().message()));
  const bool transfer = w.transfer != Transfer::kNone;
  if (transfer && !rates->empty()) {
    return Fail("--rate: upload and download rows run closed loop only (--concurrency)");
  }
  const std::string connections_text = absl::GetFlag(FLAGS_connections);
  auto connections = ParseList<int>("connections", connections_text);
  if (!connections.ok()) return Fail(std::string(connections.status().message()));
  if (connections->empty()) return Fail("--connections: name at least one count, e.g. 1 or 1,8");
  if (transfer && connections->size() > 1) {
    return Fail(
        absl::StrCat("--connections: upload and download rows stream over the client's "
                     "first channel whatever the count; give one value, not \"",
                     connections_text, "\""));
  }
  std::vector<std::string> placements;
  for (absl::string_view p :
       absl::StrSplit(absl::GetFlag(FLAGS_placement), ',', absl::SkipEmpty())) {
    if (p != "inline" && p != "tensor" && p != "shm") {
      return Fail(absl::StrCat("--placement: \"", p, "\" is not inline, tensor or shm"));
    }
    if (std::find(placements.begin(), placements.end(), p) == placements.end()) {
      placements.emplace_back(p);
    }
  }
  if (placements.empty()) return Fail("--placement: name inline, tensor or shm, or several");
  if (transfer && placements != std::vector<std::string>{"inline"}) {
    return Fail("--placement: upload and download rows move the matrix by definition");
  }
  bool tcp_baseline = false, grpc_baseline = false, service_baseline = false, echo_baseline = false;
  std::string baseline_flag = absl::GetFlag(FLAGS_baseline);
  if (transfer && baseline_flag.empty()) baseline_flag = "tcp";  // what a stream is measured by
  for (absl::string_view b : absl::StrSplit(baseline_flag, ',', absl::SkipEmpty())) {
    if (b == "tcp") {
      tcp_baseline = true;
    } else if (b == "grpc") {
      grpc_baseline = true;
    } else if (b == "service") {
      service_baseline = true;
    } else if (b == "echo") {
      echo_baseline = true;
    } else {
      return Fail(absl::StrCat("--baseline: \"", b, "\" is not tcp, grpc, service or echo"));
    }
  }
  if (transfer && echo_baseline) {
    return Fail("--baseline=echo: compute ops only; upload and download rows have the tcp echo");
  }
  const std::string progress_flag = absl::GetFlag(FLAGS_progress);
  if (progress_flag != "auto" && progress_flag != "always" && progress_flag != "never") {
    return Fail("--progress: expected auto, always or never");
  }

  ClientOptions options;
  options.target = WithDefaultPort(absl::GetFlag(FLAGS_server));
  // GetServerInfo, uploads and releases; compute requests use --deadline
  // themselves.
  options.deadline = std::max(absl::Seconds(30), absl::GetFlag(FLAGS_deadline));
  options.use_tls = absl::GetFlag(FLAGS_tls);
  options.tls_root_ca_file = absl::GetFlag(FLAGS_tls_ca);
  options.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  options.bearer_token_file = absl::GetFlag(FLAGS_token_file);
  options.lb_policy = absl::GetFlag(FLAGS_lb);
  options.large_message_transport = !absl::GetFlag(FLAGS_grpc_defaults);
  // One client per --connections value, each with that many channels; the
  // first value's client does everything else (server info, uploads,
  // releases, shared memory, the upload and download rows).
  std::map<int, Client> clients;
  for (int n : *connections) {
    if (clients.contains(n)) continue;
    options.connections = n;
    auto created = Client::Create(options);
    if (!created.ok()) return Fail(std::string(created.status().message()));
    clients.emplace(n, std::move(*created));
  }
  Client* const client = &clients.at(connections->front());
  auto info = client->GetServerInfo();
  if (!info.ok()) return Fail(std::string(info.status().message()));
  auto variants = transfer ? absl::StatusOr<std::vector<std::string>>(
                                 std::vector<std::string>{TransferName(w.transfer)})
                           : ResolveVariants(absl::GetFlag(FLAGS_variants), *info, w);
  if (!variants.ok()) return Fail(std::string(variants.status().message()));

  CallSettings call_settings;
  call_settings.deadline = absl::GetFlag(FLAGS_deadline);
  call_settings.authorization = client->authorization();
  call_settings.busy_poll = absl::GetFlag(FLAGS_busy_poll);

  MeasureSettings measure;
  measure.warmup = absl::GetFlag(FLAGS_warmup);
  measure.window = absl::GetFlag(FLAGS_window);
  measure.min_requests_per_window = absl::GetFlag(FLAGS_min_requests);
  measure.stable_windows = std::max(1, absl::GetFlag(FLAGS_stable_windows));
  measure.stability = absl::GetFlag(FLAGS_stability);
  measure.max_time = absl::GetFlag(FLAGS_max_time);

  RunInfo run;
  run.server = options.target;
  run.server_version = info->version();
  run.backend = info->backend();
  for (const v1::DeviceInfo& d : info->devices()) run.devices.push_back(d.name());
  run.op = transfer ? TransferName(w.transfer) : OpName(w.op);
  run.placement = absl::StrJoin(placements, ",");
  run.dtype = DTypeName(w.dtype);
  run.shape = w.ShapeText();
  run.shape_meaning = w.op == v1::OP_MATMUL
                          ? absl::StrFormat("%dx%d times %dx%d", w.m, w.k, w.k, w.n)
                          : absl::StrFormat("%dx%d", w.m, w.n);
  if (w.op == v1::OP_REDUCE && !transfer)
    run.reduce = absl::StrCat(ReduceOpName(w.reduce_op), " ", ReduceAxisName(w.axis));
  run.request_payload_bytes = w.RequestPayloadBytes();
  run.response_payload_bytes = w.ResponsePayloadBytes();
  run.started = NowRfc3339();
  run.settings = absl::StrFormat(
      "warm-up %s, windows of %s and >= %d requests until %d in a row agree within %.0f%% on "
      "throughput and p95 (at most %s per row); deadline %s; %s connection%s; %s",
      absl::FormatDuration(measure.warmup), absl::FormatDuration(measure.window),
      measure.min_requests_per_window, measure.stable_windows, measure.stability * 100,
      absl::FormatDuration(measure.max_time), absl::FormatDuration(call_settings.deadline),
      absl::StrJoin(*connections, ","), *connections == std::vector<int>{1} ? "" : "s",
      options.large_message_transport ? "client transport sized for large messages"
                                      : "client transport: gRPC defaults");
  if (call_settings.busy_poll) run.settings += "; busy-polling client";
  const int64_t payload = w.RequestPayloadBytes() + w.ResponsePayloadBytes();

  std::printf("gpucompute-loadtest: %s %s %s (%s%s) against %s (%s, %s backend, %s)\n",
              run.op.c_str(), run.shape.c_str(), run.dtype.c_str(), run.shape_meaning.c_str(),
              run.reduce.empty() ? "" : (", " + run.reduce).c_str(), run.server.c_str(),
              run.server_version.c_str(), run.backend.c_str(),
              absl::StrJoin(run.devices, "; ").c_str());
  std::printf("payload per request: %lld bytes sent, %lld received; %s\n\n",
              static_cast<long long>(w.RequestPayloadBytes()),
              static_cast<long long>(w.ResponsePayloadBytes()), run.settings.c_str());
  if (run.placement != "inline") {
    std::printf(
        "placement: %s (tensor: operands uploaded once and named by id, outputs kept and "
        "released, no matrix bytes per request; shm: operands and output in a shared-memory "
        "region, no matrix bytes on the socket, GB/s counts the bytes the server moved "
        "through the region)\n\n",
        run.placement.c_str());
  }

  // --placement=tensor: the operands held by the server for the whole run,
  // and the thread releasing kept outputs. Stream rows: the matrix moved, and
  // for downloads the tensor read back.
  std::unique_ptr<TensorReleaser> releaser;
  std::vector<Tensor> held;
  TensorPlacement tensor_placement;
  std::optional<Matrix> transfer_matrix;
  std::string download_id;
  const bool any_tensor =
      std::find(placements.begin(), placements.end(), "tensor") != placements.end();
  if (any_tensor) {
    releaser = std::make_unique<TensorReleaser>(&*client);
    tensor_placement.releaser = releaser.get();
    const std::vector<std::pair<int64_t, int64_t>> shapes =
        w.op == v1::OP_MATMUL ? std::vector<std::pair<int64_t, int64_t>>{{w.m, w.k}, {w.k, w.n}}
                              : std::vector<std::pair<int64_t, int64_t>>{{w.m, w.n}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto m = Matrix::Random(w.dtype, shapes[i].first, shapes[i].second, w.seed * 1000003 + i + 1);
      if (!m.ok()) return Fail(std::string(m.status().message()));
      auto t = client->Upload(*m);
      if (!t.ok()) return Fail(std::string(t.status().message()));
      (i == 0 ? tensor_placement.a : tensor_placement.b) = t->id();
      held.push_back(std::move(*t));
    }
  }
  // --placement=shm: one region holding a, b and the output, filled once.
  std::optional<SharedMemoryRegion> region;
  SharedMemoryPlacement shm_placement;
  if (std::find(placements.begin(), placements.end(), "shm") != placements.end()) {
    const int64_t es = DTypeSize(w.dtype);
    const bool matmul = w.op == v1::OP_MATMUL;
    const int64_t a_bytes = (matmul ? w.m * w.k : w.m * w.n) * es;
    const int64_t b_bytes = matmul ? w.k * w.n * es : 0;
    const int64_t out_bytes = w.OutputRows() * w.OutputCols() * es;
    auto created = SharedMemoryRegion::Create(*client, a_bytes + b_bytes + out_bytes);
    if (!created.ok()) {
      return Fail(
          absl::StrCat("--placement=shm (the server must share this host and run with "
                       "--allow_shared_memory): ",
                       created.status().message()));
    }
    region.emplace(std::move(*created));
    shm_placement = {region->name(), 0, a_bytes, a_bytes + b_bytes};
    for (auto [rows, cols, offset] :
         {std::tuple{matmul ? w.m : w.m, matmul ? w.k : w.n, int64_t{0}},
          std::tuple{matmul ? w.k : int64_t{0}, w.n, a_bytes}}) {
      if (rows == 0) continue;
      auto m = Matrix::Random(w.dtype, rows, cols, w.seed * 1000003 + offset + 1);
      if (!m.ok()) return Fail(std::string(m.status().message()));
      std::memcpy(region->data() + offset, m->bytes().data(), m->bytes().size());
    }
    std::printf("placement shm: region \"%s\" of %lld bytes, %s\n", region->name().c_str(),
                static_cast<long long>(region->bytes()),
                region->pinned() ? "pinned by the server for DMA" : "not pinned (CPU server)");
  }
  if (transfer) {
    auto m = Matrix::Random(w.dtype, w.m, w.n, w.seed);
    if (!m.ok()) return Fail(std::string(m.status().message()));
    transfer_matrix.emplace(std::move(*m));
    if (w.transfer == Transfer::kDownload) {
      auto t = client->Upload(*transfer_matrix);
      if (!t.ok()) return Fail(std::string(t.status().message()));
      download_id = t->id();
      held.push_back(std::move(*t));
    }
  }

  // Against a unix socket, the echo baseline crosses a unix socket too.
  const bool unix_target = IsUnixTarget(options.target);
  std::vector<Plan> plan;
  for (const auto& [wanted, name] :
       {std::pair{tcp_baseline, kTcpEcho}, std::pair{grpc_baseline, kGrpcHealth},
        std::pair{service_baseline, kServiceCall}, std::pair{echo_baseline, kGrpcEcho}}) {
    if (!wanted) continue;
    const char* row = name == kTcpEcho && unix_target ? kUnixEcho : name;
    // The echo opens its own sockets: one row per concurrency.
    for (int n : name == kTcpEcho ? std::vector<int>{0} : *connections) {
      for (int c : levels->empty() ? std::vector<int>{1} : *levels) {
        plan.push_back({row, c, 0, "inline", n});
      }
    }
  }
  for (const std::string& placement : placements) {
    for (const std::string& v : *variants) {
      for (int n : *connections) {
        // Upload and download stream over the first channel: 1 connection.
        const int used = transfer ? 1 : n;
        for (int c : *levels) plan.push_back({v, c, 0, placement, used});
        for (double r : *rates) plan.push_back({v, 0, r, placement, used});
      }
    }
  }
  const bool several_connections = connections->size() > 1;

  std::unique_ptr<TcpEchoServer> echo;
  if (tcp_baseline) {
    auto started = TcpEchoServer::Start(unix_target ? EchoTransport::kUnix : EchoTransport::kTcp);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    echo = std::move(*started);
    if (unix_target) {
      std::printf(
          "baseline: the target is a unix socket, so the echo (row %s) runs over a unix "
          "socket, not TCP; xTCP compares with it\n",
          kUnixEcho);
    }
  }
  // --baseline=echo: the first variant's inline call, sent once to the
  // server, whose response the echo server then returns to every call; one
  // client to the echo per --connections value, as for the server.
  std::optional<PreparedCall> echo_call;
  std::unique_ptr<GrpcEchoServer> grpc_echo;
  std::map<int, Client> echo_clients;
  if (echo_baseline) {
    auto op_call = PreparedCall::Create(w, variants->front() == "auto" ? "" : variants->front());
    if (!op_call.ok()) return Fail(std::string(op_call.status().message()));
    auto response = CallOnce(client->channels().front(), *op_call, call_settings);
    if (!response.ok()) {
      return Fail(absl::StrCat("--baseline=echo: the call whose response the echo sends back: ",
                               response.status().message()));
    }
    auto started =
        GrpcEchoServer::Start(unix_target ? EchoTransport::kUnix : EchoTransport::kTcp, *response);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    grpc_echo = std::move(*started);
    echo_call.emplace(PreparedCall::Echo(*op_call));
    ClientOptions echo_options;
    echo_options.target = grpc_echo->target();
    echo_options.large_message_transport = options.large_message_transport;
    for (int n : *connections) {
      echo_options.connections = n;
      auto created = Client::Create(echo_options);
      if (!created.ok()) return Fail(std::string(created.status().message()));
      echo_clients.emplace(n, std::move(*created));
    }
    std::printf(
        "baseline: row %s sends %s's request (%zu bytes, variant %s, inline) to a gRPC server "
        "in this process on %s that answers with its response as the server encoded it (%zu "
        "bytes) and does nothing else; xEcho compares inline rows' req/s with it\n",
        kGrpcEcho, run.op.c_str(), op_call->request().Length(), variants->front().c_str(),
        grpc_echo->target().c_str(), response->Length());
  }

  Progress progress(progress_flag == "always" ||
                    (progress_flag == "auto" && isatty(STDERR_FILENO)));
  // The first column fits the labels the rows will have.
  std::vector<Row> named;
  for (const Plan& p : plan) {
    named.emplace_back();
    named.back().variant = p.variant;
    named.back().placement = p.placement;
    named.back().label = label;
  }
  const int width = LabelWidth(named);
  std::printf("%s\n", FormatTableHeader(width).c_str());
  std::fflush(stdout);
  std::vector<Row> rows;
  std::map<int, double> tcp_gbytes_per_s;                     // concurrency -> GB/s
  std::map<std::pair<int, int>, double> echo_requests_per_s;  // (connections, concurrency)
  std::string prepared_variant;
  std::optional<PreparedCall> call;
  const PreparedCall health_check = PreparedCall::HealthCheck();
  const PreparedCall service_call = PreparedCall::ServiceCall();
  int64_t failed_rows = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    // The row's channels: those of the client with its --connections value.
    const Channels& channels = p.variant == kGrpcEcho ? echo_clients.at(p.connections).channels()
                               : p.connections > 0 && !transfer
                                   ? clients.at(p.connections).channels()
                                   : client->channels();
    std::unique_ptr<Driver> driver;
    if (IsSocketEcho(p.variant)) {
      driver =
          MakeTcpEcho(echo.get(), w.RequestPayloadBytes(), w.ResponsePayloadBytes(), p.concurrency);
    } else if (p.variant == kGrpcHealth || p.variant == kServiceCall) {
      driver = MakeClosedLoop(channels, p.variant == kGrpcHealth ? &health_check : &service_call,
                              call_settings, p.concurrency);
    } else if (p.variant == kGrpcEcho) {
      driver = MakeClosedLoop(channels, &*echo_call, call_settings, p.concurrency);
    } else if (transfer) {
      driver = MakeTransferLoop(client, w.transfer, &*transfer_matrix, download_id, p.concurrency);
    } else {
      const bool tensor = p.placement == "tensor";
      const bool shm = p.placement == "shm";
      if (prepared_variant != p.variant + "/" + p.placement) {
        auto prepared = PreparedCall::Create(w, p.variant == "auto" ? "" : p.variant,
                                             tensor ? &tensor_placement : nullptr,
                                             shm ? &shm_placement : nullptr);
        if (!prepared.ok()) return Fail(std::string(prepared.status().message()));
        call.emplace(std::move(*prepared));
        prepared_variant = p.variant + "/" + p.placement;
      }
      driver = p.concurrency > 0 ? MakeClosedLoop(channels, &*call, call_settings, p.concurrency)
                                 : MakeOpenLoop(channels, &*call, call_settings, p.rate,
                                                absl::GetFlag(FLAGS_max_outstanding), w.seed + i);
    }
    const std::string what = absl::StrCat(
        p.variant, p.placement == "inline" ? " " : absl::StrCat(" [", p.placement, "] "),
        p.concurrency > 0 ? absl::StrCat("c=", p.concurrency) : absl::StrFormat("r=%g/s", p.rate),
        several_connections && p.connections > 0 ? absl::StrCat(" conn=", p.connections) : "");
    Measurement m = Measure(*driver, measure,
                            [&](absl::Duration elapsed, int windows, const WindowStats* last) {
                              progress.Show(static_cast<int>(i), static_cast<int>(plan.size()),
                                            what, elapsed, measure.max_time, windows, last);
                            });
    progress.Clear();
    if (releaser != nullptr) releaser->Flush();  // the row's kept outputs, before the next row
    // The health Check and ListTensors carry no payload; the echoes carry the op's.
    const bool no_payload = p.variant == kGrpcHealth || p.variant == kServiceCall;
    Row row = MakeRow(p.variant, p.concurrency > 0 ? "closed" : "open", p.concurrency, p.rate,
                      no_payload || p.placement == "tensor" ? 0 : payload, m);
    row.placement = p.placement;
    row.connections = p.connections;
    row.label = label;
    if (IsSocketEcho(p.variant)) {
      tcp_gbytes_per_s[p.concurrency] = row.gbytes_per_s;
    } else if (p.concurrency > 0 && tcp_gbytes_per_s[p.concurrency] > 0) {
      row.vs_tcp = row.gbytes_per_s / tcp_gbytes_per_s[p.concurrency];
    }
    if (p.variant == kGrpcEcho) {
      echo_requests_per_s[{p.connections, p.concurrency}] = row.requests_per_s;
    } else if (!IsBaseline(p.variant) && p.placement == "inline" && p.concurrency > 0 &&
               echo_requests_per_s[{p.connections, p.concurrency}] > 0) {
      row.vs_grpc_echo = row.requests_per_s / echo_requests_per_s[{p.connections, p.concurrency}];
    }
    if (row.requests == 0) ++failed_rows;
    std::printf("%s\n", FormatTableRow(row, width).c_str());
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }

  // What a scrape of the server's gpucompute_requests_total should show moving
  // by: every answer, warm-up and discarded windows included.
  std::printf(
      "\nanswered in total (warm-up included; compare with the server's request counters):\n");
  for (const Row& r : rows) {
    if (IsBaseline(r.variant)) continue;
    std::string codes = absl::StrCat("OK ", r.answered_ok);
    for (const auto& [code, n] : r.answered_errors) absl::StrAppend(&codes, ", ", code, " ", n);
    std::string load = r.LoadText();
    if (several_connections) absl::StrAppend(&load, " conn=", r.connections);
    std::printf("  %-*s %-8s %s\n", width, r.Label().c_str(), load.c_str(), codes.c_str());
  }
  if (grpc_echo != nullptr)
    std::printf("  and the one call whose response %s returns\n", kGrpcEcho);
  if (grpc_echo != nullptr && grpc_echo->calls() > 0) {
    // What the echo server received and sent: the op's request and response.
    const double calls = static_cast<double>(grpc_echo->calls());
    std::printf("%s server: %lld calls answered, %g request bytes and %g response bytes each\n",
                kGrpcEcho, static_cast<long long>(grpc_echo->calls()),
                grpc_echo->request_bytes() / calls, grpc_echo->response_bytes() / calls);
  }
  if (releaser != nullptr) {
    releaser->Flush();
    std::printf("kept outputs released: %lld", static_cast<long long>(releaser->released()));
    if (releaser->failed() > 0) {
      std::printf(" (%lld not held any more)", static_cast<long long>(releaser->failed()));
    }
    std::printf("\n");
  }

  if (absl::Status st = WriteReports(run, rows); !st.ok()) return Fail(std::string(st.message()));
  // A row without a single successful request means the comparison is void.
  return failed_rows > 0 ? 1 : 0;
}

// --help prints this tool's flags and exits 0 (abseil's own --help matches
// only files named after the program, printing "No flags matched.", and
// exits 1); --version prints the tool's version, not the build mode.
void HandleHelpAndVersion(int argc, char** argv) {
  absl::FlagsUsageConfig config;
  config.version_string = [] {
    return std::string("gpucompute-loadtest " GPUCOMPUTE_VERSION "\n");
  };
  absl::SetFlagsUsageConfig(config);
  const std::set<std::string> help = {"--help", "-help", "-h", "--helpfull", "--helpshort"};
  for (int i = 1; i < argc && std::string(argv[i]) != "--"; ++i) {
    if (help.count(argv[i]) == 0) continue;
    std::printf("gpucompute-loadtest: %s\n\nFlags:\n",
                std::string(absl::ProgramUsageMessage()).c_str());
    std::map<std::string, const absl::CommandLineFlag*> own;
    for (const auto& [name, flag] : absl::GetAllFlags()) {
      if (absl::StrContains(flag->Filename(), "loadtest")) own.emplace(std::string(name), flag);
    }
    for (const auto& [name, flag] : own) {
      std::printf("  --%s=%s\n      %s\n", name.c_str(), flag->DefaultValue().c_str(),
                  flag->Help().c_str());
    }
    std::exit(0);
  }
}

}  // namespace
}  // namespace gpucompute::loadtest

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "runs one workload against a gpucompute server once per kernel variant.\n"
      "  gpucompute-loadtest --server=HOST:PORT --op=matmul --shape=1024x1024x1024 \\\n"
      "      --variants=auto,tiled32,cublas --concurrency=1,4,16,64 --html=report.html\n"
      "  gpucompute-loadtest --op=transpose --shape=4096x4096 --variants=all --rate=50,100 "
      "--baseline=tcp,grpc\n"
      "--shape for matmul is MxKxN: a is M x K, b is K x N, the result M x N.");
  gpucompute::loadtest::HandleHelpAndVersion(argc, argv);
  absl::ParseCommandLine(argc, argv);
  gpucompute::RetainLargeHostAllocations();
  // As in the server: no lock-order graph on gRPC's and our mutexes, which
  // would otherwise add a global lock to every call the load test times.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return gpucompute::loadtest::Run();
}
