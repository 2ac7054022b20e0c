// The rows of a run and its description (run_plan.h).
#include "loadtest/run_plan.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "loadtest/tcp_echo.h"

namespace gpucompute::loadtest {
namespace {

std::string NowRfc3339() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%S%Ez", absl::Now(), absl::LocalTimeZone());
}

}  // namespace

std::vector<Plan> MakePlan(const RunOptions& run, const std::vector<std::string>& variants,
                           const std::string& target) {
  // Against a unix socket, the echo baseline crosses a unix socket too.
  const bool unix_target = IsUnixTarget(target);
  const Baselines& b = run.baselines;
  std::vector<Plan> plan;
  for (const auto& [wanted, name] :
       {std::pair{b.tcp, kTcpEcho}, std::pair{b.grpc, kGrpcHealth},
        std::pair{b.service, kServiceCall}, std::pair{b.echo, kGrpcEcho}}) {
    if (!wanted) continue;
    const char* row = name == kTcpEcho && unix_target ? kUnixEcho : name;
    // The echo opens its own sockets: one row per concurrency.
    for (int n : name == kTcpEcho ? std::vector<int>{0} : run.connections) {
      for (int c : run.levels.empty() ? std::vector<int>{1} : run.levels) {
        plan.push_back({row, c, 0, "inline", n});
      }
    }
  }
  for (const std::string& placement : run.placements) {
    for (const std::string& v : variants) {
      for (int n : run.connections) {
        // Upload and download stream over the first channel: 1 connection.
        const int used = run.transfer() ? 1 : n;
        for (int c : run.levels) plan.push_back({v, c, 0, placement, used});
        for (double r : run.rates) plan.push_back({v, 0, r, placement, used});
      }
    }
  }
  return plan;
}

int LabelWidth(const std::vector<Plan>& plan, const std::string& label) {
  std::vector<Row> named;
  for (const Plan& p : plan) {
    named.emplace_back();
    named.back().variant = p.variant;
    named.back().placement = p.placement;
    named.back().label = label;
  }
  return LabelWidth(named);
}

RunInfo DescribeRun(const RunOptions& run, const ClientOptions& options, const v1::ServerInfo& info,
                    const CallSettings& call_settings, const MeasureSettings& measure) {
  const Workload& w = run.workload;
  const bool transfer = run.transfer();
  RunInfo described;
  described.server = options.target;
  described.server_version = info.version();
  described.backend = info.backend();
  for (const v1::DeviceInfo& device : info.devices()) described.devices.push_back(device.name());
  described.op = transfer ? TransferName(w.transfer) : OpName(w.op);
  described.placement = absl::StrJoin(run.placements, ",");
  described.dtype = DTypeName(w.dtype);
  described.shape = w.ShapeText();
  described.shape_meaning = w.op == v1::OP_MATMUL
                                ? absl::StrFormat("%dx%d times %dx%d", w.m, w.k, w.k, w.n)
                                : absl::StrFormat("%dx%d", w.m, w.n);
  if (w.op == v1::OP_REDUCE && !transfer)
    described.reduce = absl::StrCat(ReduceOpName(w.reduce_op), " ", ReduceAxisName(w.axis));
  described.request_payload_bytes = w.RequestPayloadBytes();
  described.response_payload_bytes = w.ResponsePayloadBytes();
  described.started = NowRfc3339();
  described.settings = absl::StrFormat(
      "warm-up %s, windows of %s and >= %d requests until %d in a row agree within %.0f%% on "
      "throughput and p95 (at most %s per row); deadline %s; %s connection%s; %s",
      absl::FormatDuration(measure.warmup), absl::FormatDuration(measure.window),
      measure.min_requests_per_window, measure.stable_windows, measure.stability * 100,
      absl::FormatDuration(measure.max_time), absl::FormatDuration(call_settings.deadline),
      absl::StrJoin(run.connections, ","), run.connections == std::vector<int>{1} ? "" : "s",
      options.large_message_transport ? "client transport sized for large messages"
                                      : "client transport: gRPC defaults");
  if (call_settings.busy_poll) described.settings += "; busy-polling client";
  if (call_settings.load_threads > 0) {
    absl::StrAppend(&described.settings, "; ", call_settings.load_threads, " load thread",
                    call_settings.load_threads == 1 ? "" : "s");
  }

  std::printf("gpucompute-loadtest: %s %s %s (%s%s) against %s (%s, %s backend, %s)\n",
              described.op.c_str(), described.shape.c_str(), described.dtype.c_str(),
              described.shape_meaning.c_str(),
              described.reduce.empty() ? "" : (", " + described.reduce).c_str(),
              described.server.c_str(), described.server_version.c_str(), described.backend.c_str(),
              absl::StrJoin(described.devices, "; ").c_str());
  std::printf("payload per request: %lld bytes sent, %lld received; %s\n\n",
              static_cast<long long>(w.RequestPayloadBytes()),
              static_cast<long long>(w.ResponsePayloadBytes()), described.settings.c_str());
  if (described.placement != "inline") {
    std::printf(
        "placement: %s (tensor: operands uploaded once and named by id, outputs kept and "
        "released, no matrix bytes per request; shm: operands and output in a shared-memory "
        "region, no matrix bytes on the socket, GB/s counts the bytes the server moved "
        "through the region)\n\n",
        described.placement.c_str());
  }
  return described;
}

}  // namespace gpucompute::loadtest
