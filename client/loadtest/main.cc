// gpucompute-loadtest: runs one workload against a gpucompute server once per
// kernel variant, under closed-loop concurrency sweeps and open-loop Poisson
// rates, and reports throughput, latency percentiles, errors and the server's
// own time breakdown next to the client-seen latency.
//
// This file measures the rows and prints them; the flags are read in
// run_options.cc, the rows planned in run_plan.cc, and what the rows call
// held in operands.cc and echo_baselines.cc.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/client.h"
#include "gpucompute/common/flags_usage.h"
#include "gpucompute/host_memory.h"
#include "loadtest/echo_baselines.h"
#include "loadtest/flags.h"
#include "loadtest/load.h"
#include "loadtest/operands.h"
#include "loadtest/progress.h"
#include "loadtest/report.h"
#include "loadtest/report_files.h"
#include "loadtest/run_options.h"
#include "loadtest/run_plan.h"

namespace gpucompute::loadtest {
namespace {

int Fail(absl::string_view message) {
  std::fprintf(stderr, "gpucompute-loadtest: %s\n", std::string(message).c_str());
  return 2;
}

// What the rows' drivers are made from.
struct RowSources {
  const RunOptions& run;
  const std::map<int, Client>& clients;  // by --connections value
  const Client& client;                  // the first value's
  const HeldOperands& operands;
  const EchoBaselines& echoes;
  const CallSettings& call_settings;
};

// The calls the rows send, kept from row to row.
struct RowCalls {
  const PreparedCall health_check = PreparedCall::HealthCheck();
  const PreparedCall service_call = PreparedCall::ServiceCall();
  // The compute call of the last variant and placement, made anew when they change.
  std::string prepared_variant;
  std::optional<PreparedCall> call;
};

// The driver of row `index` of the plan.
absl::StatusOr<std::unique_ptr<Driver>> MakeDriver(const RowSources& s, RowCalls& calls,
                                                   const Plan& p, size_t index) {
  const Workload& w = s.run.workload;
  const bool transfer = s.run.transfer();
  // The row's channels: those of the client with its --connections value.
  const Channels& channels =
      p.variant == kGrpcEcho           ? s.echoes.grpc_clients.at(p.connections).channels()
      : p.connections > 0 && !transfer ? s.clients.at(p.connections).channels()
                                       : s.client.channels();
  if (IsSocketEcho(p.variant)) {
    return MakeTcpEcho(s.echoes.tcp.get(), w.RequestPayloadBytes(), w.ResponsePayloadBytes(),
                       p.concurrency);
  }
  if (p.variant == kGrpcHealth || p.variant == kServiceCall) {
    return MakeClosedLoop(channels,
                          p.variant == kGrpcHealth ? &calls.health_check : &calls.service_call,
                          s.call_settings, p.concurrency);
  }
  if (p.variant == kGrpcEcho) {
    return MakeClosedLoop(channels, &*s.echoes.grpc_call, s.call_settings, p.concurrency);
  }
  if (transfer) {
    return MakeTransferLoop(&s.client, w.transfer, &*s.operands.transfer_matrix,
                            s.operands.download_id, p.concurrency);
  }
  if (calls.prepared_variant != p.variant + "/" + p.placement) {
    auto prepared =
        PreparedCall::Create(w, p.variant == "auto" ? "" : p.variant,
                             p.placement == "tensor" ? &s.operands.tensor_placement : nullptr,
                             p.placement == "shm" ? &s.operands.shm_placement : nullptr);
    if (!prepared.ok()) return prepared.status();
    calls.call.emplace(std::move(*prepared));
    calls.prepared_variant = p.variant + "/" + p.placement;
  }
  if (p.concurrency > 0)
    return MakeClosedLoop(channels, &*calls.call, s.call_settings, p.concurrency);
  return MakeOpenLoop(channels, &*calls.call, s.call_settings, p.rate,
                      absl::GetFlag(FLAGS_max_outstanding), w.seed + index);
}

// The baselines' figures so far, which later rows are compared with.
struct BaselineFigures {
  std::map<int, double> tcp_gbytes_per_s;                     // concurrency -> GB/s
  std::map<std::pair<int, int>, double> echo_requests_per_s;  // (connections, concurrency)

  // Keeps a baseline row's figure, or sets an op row's ratio to one.
  void Compare(const Plan& p, Row& row) {
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
  }
};

// Measures the plan's rows in order, printing each row of the table as it
// ends (column width `width`).
absl::StatusOr<std::vector<Row>> MeasureRows(const std::vector<Plan>& plan,
                                             const RowSources& sources,
                                             const MeasureSettings& measure, int width) {
  const RunOptions& run = sources.run;
  const Workload& w = run.workload;
  const int64_t payload = w.RequestPayloadBytes() + w.ResponsePayloadBytes();
  TensorReleaser* const releaser = sources.operands.releaser.get();
  Progress progress(run.show_progress);
  RowCalls calls;
  BaselineFigures baselines;
  std::vector<Row> rows;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Plan& p = plan[i];
    absl::StatusOr<std::unique_ptr<Driver>> driver = MakeDriver(sources, calls, p, i);
    if (!driver.ok()) return driver.status();
    const std::string what = absl::StrCat(
        p.variant, p.placement == "inline" ? " " : absl::StrCat(" [", p.placement, "] "),
        p.concurrency > 0 ? absl::StrCat("c=", p.concurrency) : absl::StrFormat("r=%g/s", p.rate),
        run.connections.size() > 1 && p.connections > 0 ? absl::StrCat(" conn=", p.connections)
                                                        : "");
    Measurement m = Measure(**driver, measure,
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
    row.label = run.label;
    baselines.Compare(p, row);
    std::printf("%s\n", FormatTableRow(row, width).c_str());
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }
  return rows;
}

// What a scrape of the server's gpucompute_requests_total should show moving
// by: every answer, warm-up and discarded windows included; then what the
// gRPC echo answered and how many kept outputs were released.
void PrintAnsweredTotals(const std::vector<Row>& rows, int width, bool several_connections,
                         const GrpcEchoServer* grpc_echo, TensorReleaser* releaser) {
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
}

// 0 when every row had a successful request; 1 when one had none (the
// comparison is void); 2 for a mistake in the flags or a failed set-up.
// (A flag whose text abseil's parser cannot read at all, or an unknown
// flag, ends the process in that parser, with status 1.)
int Run() {
  if (!absl::GetFlag(FLAGS_merge_json).empty()) {
    if (absl::Status st = MergeReports(); !st.ok()) return Fail(st.message());
    return 0;
  }
  absl::StatusOr<RunOptions> parsed = RunOptionsFromFlags();
  if (!parsed.ok()) return Fail(parsed.status().message());
  if (absl::Status st = CheckReportPaths(); !st.ok()) return Fail(st.message());
  const RunOptions& run = *parsed;

  // One client per --connections value, each with that many channels; the
  // first value's client does everything else (server info, uploads,
  // releases, shared memory, the upload and download rows).
  ClientOptions options = ClientOptionsFromFlags();
  std::map<int, Client> clients;
  for (int n : run.connections) {
    if (clients.contains(n)) continue;
    options.connections = n;
    auto created = Client::Create(options);
    if (!created.ok()) return Fail(created.status().message());
    clients.emplace(n, std::move(*created));
  }
  Client& client = clients.at(run.connections.front());
  auto info = client.GetServerInfo();
  if (!info.ok()) return Fail(info.status().message());
  auto variants = VariantsFromFlags(*info, run.workload);
  if (!variants.ok()) return Fail(variants.status().message());
  if (absl::Status st = CheckWorkloadFitsServer(run, *info); !st.ok()) return Fail(st.message());
  const CallSettings call_settings = CallSettingsFromFlags(client);
  const MeasureSettings measure = MeasureSettingsFromFlags();
  const RunInfo described = DescribeRun(run, options, *info, call_settings, measure);

  HeldOperands operands;
  if (absl::Status st = HoldOperands(run, client, operands); !st.ok()) return Fail(st.message());
  const std::vector<Plan> plan = MakePlan(run, *variants, options.target);
  EchoBaselines echoes;
  if (absl::Status st =
          StartEchoBaselines(run, options, client, call_settings, variants->front(), echoes);
      !st.ok()) {
    return Fail(st.message());
  }

  const int width = LabelWidth(plan, run.label);
  std::printf("%s\n", FormatTableHeader(width).c_str());
  std::fflush(stdout);
  const RowSources sources{run, clients, client, operands, echoes, call_settings};
  absl::StatusOr<std::vector<Row>> rows = MeasureRows(plan, sources, measure, width);
  if (!rows.ok()) return Fail(rows.status().message());
  std::printf("%s", FormatWays(*rows, width).c_str());
  PrintAnsweredTotals(*rows, width, run.connections.size() > 1, echoes.grpc.get(),
                      operands.releaser.get());
  if (absl::Status st = WriteReports(described, *rows); !st.ok()) return Fail(st.message());
  for (const Row& row : *rows) {
    if (row.requests == 0) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace gpucompute::loadtest

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpucompute-loadtest: runs one workload against a gpucompute server once per kernel "
      "variant.\n"
      "  gpucompute-loadtest --server=HOST:PORT --op=matmul --shape=1024x1024x1024 \\\n"
      "      --variants=auto,tiled32,cublas --concurrency=1,4,16,64 --html=report.html\n"
      "  gpucompute-loadtest --op=transpose --shape=4096x4096 --variants=all --rate=50,100 "
      "--baseline=tcp,grpc\n"
      "--shape for matmul is MxKxN: a is M x K, b is K x N, the result M x N.");
  gpucompute::common::HandleHelpAndVersion(argc, argv, "gpucompute-loadtest", GPUCOMPUTE_VERSION);
  if (const std::string error = gpucompute::common::FlagSyntaxError(argc, argv); !error.empty()) {
    std::fprintf(stderr, "gpucompute-loadtest: %s (see --help)\n", error.c_str());
    return 2;
  }
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {  // [0] is the program
    std::fprintf(stderr,
                 "gpucompute-loadtest: unexpected argument '%s': every setting is a --flag "
                 "(see --help)\n",
                 positional[1]);
    return 2;
  }
  gpucompute::RetainLargeHostAllocations();
  // As in the server: no lock-order graph on gRPC's and our mutexes, which
  // would otherwise add a global lock to every call the load test times.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return gpucompute::loadtest::Run();
}
