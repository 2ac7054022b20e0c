// info and health: what the server runs on and offers, and whether it serves.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "command.h"
#include "gpucompute/common/stats.h"

namespace gpucompute::cli {

namespace {

int RunInfo(const ParsedArgs&, const Client& client) {
  absl::StatusOr<v1::ServerInfo> info = client.GetServerInfo();
  if (!info.ok()) return CallFailed(info.status());
  std::printf("server      %s\n", client.target().c_str());
  std::printf("version     %s\n", info->version().c_str());
  std::printf("backend     %s\n", info->backend().c_str());
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::DeviceInfo& dev = info->devices(i);
    // DeviceInfo.multiprocessors holds cores on the CPU backend.
    std::printf("%-11s %s  (%s, %d %s)%s\n", i == 0 ? "devices" : "", dev.name().c_str(),
                FormatBytes(dev.memory_bytes()).c_str(), dev.multiprocessors(),
                info->backend() == "cpu" ? "cores" : "SMs",
                dev.healthy() ? "" : "  OUT OF SERVICE");
    std::printf(
        "%-11s   peaks %.1f GB/s, %.1f GFLOP/s fp32, %.1f GFLOP/s fp64, %.1f GFLOP/s 16-bit\n", "",
        dev.peak_gbytes_per_s(), dev.peak_gflops_fp32(), dev.peak_gflops_fp64(),
        dev.peak_gflops_half());
    if (info->backend() == "cpu") continue;  // no device pool on the CPU backend
    std::printf("%-11s   pool %s reserved, %s in use; %" PRId64 " device mallocs, %" PRId64
                " pool growths, %" PRId64 " pinned host allocs\n",
                "", FormatBytes(dev.pool_reserved_bytes()).c_str(),
                FormatBytes(dev.pool_used_bytes()).c_str(), dev.device_malloc_calls(),
                dev.pool_growths(), dev.host_alloc_calls());
  }
  std::printf("max matrix  %s (%" PRId64 " bytes)\n", FormatBytes(info->max_matrix_bytes()).c_str(),
              info->max_matrix_bytes());
  if (info->max_batch_size() > 1) {
    std::printf("batching    up to %d small requests, waiting %d us for company\n",
                info->max_batch_size(), info->batch_delay_us());
  } else if (info->max_batch_size() == 1) {
    std::printf("batching    off\n");
  }
  size_t width = 0;
  for (const v1::VariantInfo& v : info->variants()) width = std::max(width, v.name().size());
  const int w = static_cast<int>(width);
  for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
    std::printf("\n%s variants:\n", OpName(op));
    for (const v1::VariantInfo& v : info->variants()) {
      if (v.op() != op) continue;
      std::vector<std::string> dtypes;
      for (int t : v.dtypes()) dtypes.push_back(ProtoDTypeText(t));
      std::printf("  %-*s  %-34s  %-4s  %s\n", w, v.name().c_str(),
                  absl::StrJoin(dtypes, ",").c_str(), v.reduced_precision() ? "tf32" : "",
                  v.description().c_str());
    }
  }
  return kExitOk;
}

int RunHealth(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<HealthStatus> status = client.Health(args.Get("service"));
  if (!status.ok()) return CallFailed(status.status());
  std::printf("%s\n", HealthStatusName(*status));
  return *status == HealthStatus::kServing ? kExitOk : kExitFailed;
}

// Round trips that do no work, timed: what the network and gRPC cost for
// the bytes, before any op.
int RunEcho(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<int64_t> response_bytes = ParseInt(args, "response_bytes", 0);
  if (!response_bytes.ok()) return UsageError(response_bytes.status());
  absl::StatusOr<int64_t> payload_bytes = ParseInt(args, "payload_bytes", 0);
  if (!payload_bytes.ok()) return UsageError(payload_bytes.status());
  absl::StatusOr<int64_t> count = ParseInt(args, "count", 1, 1000000);
  if (!count.ok()) return UsageError(count.status());
  std::vector<double> us;
  for (int64_t i = 0; i < *count; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<int64_t> got = client.Echo(*response_bytes, *payload_bytes);
    if (!got.ok()) return CallFailed(got.status());
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - start));
  }
  std::printf("%" PRId64 " echoes of %" PRId64 " bytes out and %" PRId64
              " back: min %.0f us, median %.0f us, max %.0f us\n",
              *count, *payload_bytes, *response_bytes, *std::min_element(us.begin(), us.end()),
              common::Median(us), *std::max_element(us.begin(), us.end()));
  return kExitOk;
}

}  // namespace

std::vector<Command> ServerCommands() {
  return {
      {"info",
       "server version, devices and kernel variants",
       "[flags]",
       false,
       "Prints the server's version, backend, devices, largest accepted matrix and\n"
       "the kernel variants of each operation.",
       {},
       10000,
       RunInfo},
      {"health",
       "health check; exit 0 when SERVING",
       "[flags]",
       false,
       "Asks grpc.health.v1.Health/Check. Prints the status; exits 0 when SERVING\n"
       "and 1 otherwise (for container health checks).",
       {{"service", "NAME", "", "service to ask about (default: the whole server)"}},
       5000,
       RunHealth},
      {"echo",
       "round trips that do no work, timed",
       "[flags]",
       false,
       "Calls Echo --count times, sending --payload_bytes and getting --response_bytes\n"
       "zero bytes back, and prints the fastest, median and slowest round trip: what\n"
       "the network and gRPC cost for those bytes, with no work behind them.",
       {{"payload_bytes", "N", "0", "bytes sent with each call"},
        {"response_bytes", "N", "0", "bytes asked back (at most the server's max matrix)"},
        {"count", "N", "10", "round trips (1 to 1000000)"}},
       5000,
       RunEcho},
  };
}

}  // namespace gpucompute::cli
