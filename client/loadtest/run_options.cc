// gpucompute-loadtest's flags read into the run's settings (run_options.h).
#include "loadtest/run_options.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gpucompute/common/flag_checks.h"
#include "loadtest/flags.h"

namespace gpucompute::loadtest {
namespace {

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

// A comma-separated list of positive numbers (--rate, --concurrency,
// --connections): whole ones up to 2^31 - 1, or finite ones; empty text
// gives an empty list, text with no number in it an error.
template <typename T>
absl::StatusOr<std::vector<T>> ParseList(const std::string& flag, const std::string& text) {
  std::vector<T> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    T v;
    bool ok;
    if constexpr (std::is_same_v<T, int>) {
      ok = absl::SimpleAtoi(part, &v) && v > 0;
    } else {
      // Decimal only: SimpleAtod also takes nan, inf and hexadecimal.
      ok = part.find_first_not_of("0123456789.eE+-") == absl::string_view::npos &&
           absl::SimpleAtod(part, &v) && std::isfinite(v) && v > 0;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": \"", std::string(part), "\" is not ",
                       std::is_same_v<T, int> ? "a whole number from 1 to 2147483647"
                                              : "a positive decimal number"));
    }
    values.push_back(v);
  }
  if (values.empty() && !text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", text, "\" names no value; give one or more, e.g. 1,8"));
  }
  return values;
}

// The longest --max_time, --deadline and --warmup taken: a day.
constexpr absl::Duration kLongestDuration = absl::Hours(24);
// Most requests an open-loop row keeps in flight, and windows to agree.
constexpr int32_t kMaxOutstanding = 1000000;
constexpr int32_t kMaxStableWindows = 1000000;
constexpr int32_t kMaxLoadThreads = 4096;

// The measurement, call and open-loop flags, each within its bounds.
absl::Status CheckMeasureFlags() {
  const absl::Duration max_time = absl::GetFlag(FLAGS_max_time);
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  const absl::Duration window = absl::GetFlag(FLAGS_window);
  const absl::Duration deadline = absl::GetFlag(FLAGS_deadline);
  auto text = [](absl::Duration d) { return absl::FormatDuration(d); };
  if (max_time <= absl::ZeroDuration() || max_time > kLongestDuration) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_time: must be above 0 and at most 24h, got ", text(max_time)));
  }
  if (warmup < absl::ZeroDuration() || warmup >= max_time) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup: must be 0 or more and less than --max_time (", text(max_time),
                     "), got ", text(warmup)));
  }
  if (window <= absl::ZeroDuration() || window > max_time) {
    return absl::InvalidArgumentError(
        absl::StrCat("--window: must be above 0 and at most "
                     "--max_time (",
                     text(max_time), "), got ", text(window)));
  }
  if (deadline <= absl::ZeroDuration() || deadline > kLongestDuration) {
    return absl::InvalidArgumentError(
        absl::StrCat("--deadline: must be above 0 and at most 24h, got ", text(deadline)));
  }
  for (const absl::Status& s : {
           common::CheckFlagAtLeast("min_requests", absl::GetFlag(FLAGS_min_requests), 1),
           common::CheckFlagRange("stable_windows", absl::GetFlag(FLAGS_stable_windows), 1,
                                  kMaxStableWindows),
           common::CheckFlagRange("max_outstanding", absl::GetFlag(FLAGS_max_outstanding), 1,
                                  kMaxOutstanding),
           common::CheckFlagRange("load_threads", absl::GetFlag(FLAGS_load_threads), 0,
                                  kMaxLoadThreads),
       }) {
    if (!s.ok()) return s;
  }
  const double stability = absl::GetFlag(FLAGS_stability);
  if (!(stability > 0 && stability <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stability: must be above 0 and at most 1, got ", stability));
  }
  const std::string lb = absl::GetFlag(FLAGS_lb);
  if (!lb.empty() && lb != "pick_first" && lb != "round_robin") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lb: must be empty, pick_first or round_robin, got \"", lb, "\""));
  }
  return absl::OkStatus();
}

// The matrices a workload's calls hold, named: a streamed tensor, a MatMul's
// operands and result, or the input of a Transpose or Reduce (whose result
// is no larger).
struct HeldMatrix {
  const char* what;
  int64_t rows, cols;
};
std::vector<HeldMatrix> HeldMatrices(const Workload& w) {
  if (w.transfer != Transfer::kNone) return {{"tensor", w.m, w.n}};
  if (w.op == v1::OP_MATMUL)
    return {{"input a", w.m, w.k}, {"input b", w.k, w.n}, {"output", w.m, w.n}};
  return {{"input", w.m, w.n}};
}

// Every matrix of the workload has a byte size (no overflow), and no more
// than 2^50 bytes, so that the payload sums cannot overflow either.
absl::Status CheckWorkloadSize(const Workload& w) {
  constexpr int64_t kMaxMatrixBytes = int64_t{1} << 50;
  for (const HeldMatrix& h : HeldMatrices(w)) {
    absl::StatusOr<int64_t> bytes = MatrixByteSize(w.dtype, h.rows, h.cols);
    if (!bytes.ok() || *bytes > kMaxMatrixBytes) {
      return absl::InvalidArgumentError(absl::StrCat("--shape: a ", h.rows, "x", h.cols, " ",
                                                     DTypeName(w.dtype),
                                                     " matrix is too large to hold"));
    }
  }
  return absl::OkStatus();
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
  if (absl::Status s = CheckWorkloadSize(w); !s.ok()) return s;
  return w;
}

// --placement: each of inline, tensor and shm at most once, in the order given.
absl::StatusOr<std::vector<std::string>> PlacementsFromFlag(bool transfer) {
  std::vector<std::string> placements;
  for (absl::string_view p :
       absl::StrSplit(absl::GetFlag(FLAGS_placement), ',', absl::SkipEmpty())) {
    if (p != "inline" && p != "tensor" && p != "shm") {
      return absl::InvalidArgumentError(
          absl::StrCat("--placement: \"", p, "\" is not inline, tensor or shm"));
    }
    if (std::find(placements.begin(), placements.end(), p) == placements.end()) {
      placements.emplace_back(p);
    }
  }
  if (placements.empty()) {
    return absl::InvalidArgumentError("--placement: name inline, tensor or shm, or several");
  }
  if (transfer && placements != std::vector<std::string>{"inline"}) {
    return absl::InvalidArgumentError(
        "--placement: upload and download rows move the matrix by definition");
  }
  return placements;
}

// As the server's --grpc_queues.
constexpr int kMaxEchoQueues = 256;

absl::StatusOr<Baselines> BaselinesFromFlag(bool transfer) {
  Baselines baselines;
  std::string baseline_flag = absl::GetFlag(FLAGS_baseline);
  if (transfer && baseline_flag.empty()) baseline_flag = "tcp";  // what a stream is measured by
  for (absl::string_view b : absl::StrSplit(baseline_flag, ',', absl::SkipEmpty())) {
    if (b == "tcp") {
      baselines.tcp = true;
    } else if (b == "grpc") {
      baselines.grpc = true;
    } else if (b == "service") {
      baselines.service = true;
    } else if (b == "echo") {
      baselines.echo = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--baseline: \"", b, "\" is not tcp, grpc, service or echo"));
    }
  }
  if (transfer && baselines.echo) {
    return absl::InvalidArgumentError(
        "--baseline=echo: compute ops only; upload and download rows have the tcp echo");
  }
  const std::string echo_at = absl::GetFlag(FLAGS_echo_at);
  if (echo_at != "loadtest" && echo_at != "server") {
    return absl::InvalidArgumentError(
        absl::StrCat("--echo_at: \"", echo_at, "\" is not loadtest or server"));
  }
  baselines.echo_at_server = echo_at == "server";
  baselines.echo_queues = absl::GetFlag(FLAGS_echo_grpc_queues);
  if (baselines.echo_queues < 0 || baselines.echo_queues > kMaxEchoQueues) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--echo_grpc_queues: must be 0 to ", kMaxEchoQueues, ", got ", baselines.echo_queues));
  }
  return baselines;
}

}  // namespace

bool RunOptions::HasPlacement(const std::string& placement) const {
  return std::find(placements.begin(), placements.end(), placement) != placements.end();
}

absl::StatusOr<RunOptions> RunOptionsFromFlags() {
  RunOptions run;
  run.label = absl::GetFlag(FLAGS_label);
  if (run.label.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("--label: one line of text, without line breaks");
  }
  absl::StatusOr<Workload> workload = WorkloadFromFlags();
  if (!workload.ok()) return workload.status();
  run.workload = *workload;
  if (absl::Status s = CheckMeasureFlags(); !s.ok()) return s;
  const bool transfer = run.transfer();

  absl::StatusOr<std::vector<double>> rates = ParseList<double>("rate", absl::GetFlag(FLAGS_rate));
  if (!rates.ok()) return rates.status();
  run.rates = std::move(*rates);
  std::string concurrency_text = absl::GetFlag(FLAGS_concurrency);
  if (concurrency_text.empty() && run.rates.empty()) concurrency_text = "1,4,16";
  absl::StatusOr<std::vector<int>> levels = ParseList<int>("concurrency", concurrency_text);
  if (!levels.ok()) return levels.status();
  run.levels = std::move(*levels);
  if (transfer && !run.rates.empty()) {
    return absl::InvalidArgumentError(
        "--rate: upload and download rows run closed loop only (--concurrency)");
  }

  const std::string connections_text = absl::GetFlag(FLAGS_connections);
  absl::StatusOr<std::vector<int>> connections = ParseList<int>("connections", connections_text);
  if (!connections.ok()) return connections.status();
  run.connections = std::move(*connections);
  if (run.connections.empty()) {
    return absl::InvalidArgumentError("--connections: name at least one count, e.g. 1 or 1,8");
  }
  if (transfer && run.connections.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--connections: upload and download rows stream over the client's "
                     "first channel whatever the count; give one value, not \"",
                     connections_text, "\""));
  }

  absl::StatusOr<std::vector<std::string>> placements = PlacementsFromFlag(transfer);
  if (!placements.ok()) return placements.status();
  run.placements = std::move(*placements);
  absl::StatusOr<Baselines> baselines = BaselinesFromFlag(transfer);
  if (!baselines.ok()) return baselines.status();
  run.baselines = *baselines;

  const std::string progress = absl::GetFlag(FLAGS_progress);
  if (progress != "auto" && progress != "always" && progress != "never") {
    return absl::InvalidArgumentError("--progress: expected auto, always or never");
  }
  run.show_progress = progress == "always" || (progress == "auto" && isatty(STDERR_FILENO));
  return run;
}

ClientOptions ClientOptionsFromFlags() {
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
  return options;
}

CallSettings CallSettingsFromFlags(const Client& client) {
  CallSettings settings;
  settings.deadline = absl::GetFlag(FLAGS_deadline);
  settings.authorization = client.authorization();
  settings.busy_poll = absl::GetFlag(FLAGS_busy_poll);
  settings.load_threads = absl::GetFlag(FLAGS_load_threads);
  return settings;
}

MeasureSettings MeasureSettingsFromFlags() {
  MeasureSettings measure;
  measure.warmup = absl::GetFlag(FLAGS_warmup);
  measure.window = absl::GetFlag(FLAGS_window);
  measure.min_requests_per_window = absl::GetFlag(FLAGS_min_requests);
  measure.stable_windows = absl::GetFlag(FLAGS_stable_windows);
  measure.stability = absl::GetFlag(FLAGS_stability);
  measure.max_time = absl::GetFlag(FLAGS_max_time);
  return measure;
}

absl::StatusOr<std::vector<std::string>> VariantsFromFlags(const v1::ServerInfo& info,
                                                           const Workload& w) {
  if (w.transfer != Transfer::kNone) return std::vector<std::string>{TransferName(w.transfer)};
  const std::string flag = absl::GetFlag(FLAGS_variants);
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

absl::Status CheckWorkloadFitsServer(const RunOptions& run, const v1::ServerInfo& info) {
  const Workload& w = run.workload;
  // A streamed tensor is held to the tensor budget; matrices that travel with
  // a compute call are each held to max_matrix_bytes (a tensor operand or a
  // kept result to the budget, which this run's placements may not need).
  const bool streamed = w.transfer != Transfer::kNone;
  if (!streamed && !run.HasPlacement("inline") && !run.HasPlacement("shm")) {
    return absl::OkStatus();
  }
  const int64_t limit = streamed ? info.tensor_memory_bytes() : info.max_matrix_bytes();
  const char* limit_name = streamed ? "tensor budget" : "max_matrix_bytes";
  for (const HeldMatrix& h : HeldMatrices(w)) {
    const int64_t bytes = *MatrixByteSize(w.dtype, h.rows, h.cols);  // checked by the flags
    if (limit > 0 && bytes > limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shape: the ", h.what, ", ", h.rows, "x", h.cols, " ", DTypeName(w.dtype),
                       ", is ", bytes, " bytes, above the server's ", limit_name, " of ", limit));
    }
  }
  return absl::OkStatus();
}

const char* TransferName(Transfer t) { return t == Transfer::kUpload ? "upload" : "download"; }

}  // namespace gpucompute::loadtest
