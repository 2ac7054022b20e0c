// gpucompute-loadtest's flags read into the run's settings (run_options.h).
#include "loadtest/run_options.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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
// --connections); empty text gives an empty list.
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
  return settings;
}

MeasureSettings MeasureSettingsFromFlags() {
  MeasureSettings measure;
  measure.warmup = absl::GetFlag(FLAGS_warmup);
  measure.window = absl::GetFlag(FLAGS_window);
  measure.min_requests_per_window = absl::GetFlag(FLAGS_min_requests);
  measure.stable_windows = std::max(1, absl::GetFlag(FLAGS_stable_windows));
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

const char* TransferName(Transfer t) { return t == Transfer::kUpload ? "upload" : "download"; }

}  // namespace gpucompute::loadtest
