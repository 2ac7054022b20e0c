#include "loadtest/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loadtest/report_text.h"

namespace gpucompute::loadtest {
namespace {

double Us(int64_t ns) { return ns / 1000.0; }

}  // namespace

std::string Html(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

// The mean server batch, "1.00"; "-" without a server report.
std::string BatchText(const Row& r) {
  return r.has_server_report && r.batch > 0 ? absl::StrFormat("%.2f", r.batch) : std::string("-");
}

std::string FormatMicros(double us) {
  if (us < 1000) return absl::StrFormat("%.0f us", us);
  if (us < 1e6) return absl::StrFormat("%.3g ms", us / 1000);
  return absl::StrFormat("%.3g s", us / 1e6);
}

std::string Row::LoadText() const {
  return mode == "open" ? absl::StrFormat("r=%g/s", rate) : absl::StrCat("c=", concurrency);
}

std::string Row::ConnectionsText() const {
  return connections > 0 ? absl::StrCat(connections) : "-";
}

std::string Row::ErrorsText() const {
  std::vector<std::string> parts;
  for (const auto& [code, count] : errors) parts.push_back(absl::StrCat(code, ":", count));
  if (dropped > 0) parts.push_back(absl::StrCat("DROPPED:", dropped));
  return parts.empty() ? "0" : absl::StrJoin(parts, " ");
}

std::string Row::Label() const {
  std::string text = placement == "inline" || placement.empty()
                         ? variant
                         : absl::StrCat(variant, " [", placement, "]");
  if (!label.empty()) absl::StrAppend(&text, " ", label);
  return text;
}

Row MakeRow(std::string variant, std::string mode, int concurrency, double rate,
            int64_t payload_bytes, const Measurement& m) {
  Row r;
  r.variant = std::move(variant);
  r.mode = std::move(mode);
  r.concurrency = concurrency;
  r.rate = rate;
  r.payload_bytes = payload_bytes;
  const WindowStats& s = m.stats;
  r.requests = static_cast<int64_t>(s.latencies_ns.size());
  r.seconds = std::chrono::duration<double>(s.duration).count();
  r.requests_per_s = s.Throughput();
  r.gbytes_per_s = r.requests_per_s * payload_bytes / 1e9;
  if (r.requests > 0) {
    double sum = 0;
    for (int64_t ns : s.latencies_ns) sum += ns;
    r.avg_us = sum / r.requests / 1000;
    r.p50_us = Us(s.Percentile(50));
    r.p90_us = Us(s.Percentile(90));
    r.p95_us = Us(s.Percentile(95));
    r.p99_us = Us(s.Percentile(99));
    r.max_us = Us(s.latencies_ns.back());
    r.has_server_report = s.has_server_report;
    if (s.has_server_report) {
      const double n = static_cast<double>(r.requests);
      r.queue_us = s.queue_us / n;
      r.upload_us = s.upload_us / n;
      r.compute_us = s.compute_us / n;
      r.download_us = s.download_us / n;
      r.server_total_us = s.server_total_us / n;
      r.client_other_us = r.avg_us - r.server_total_us;
      r.batch = s.batch_sum / n;
    }
    if (s.stamped > 0) {
      r.has_ways = true;
      r.way_in_us = double(s.way_in_ns) / double(s.stamped) / 1000;
      r.way_out_us = double(s.way_out_ns) / double(s.stamped) / 1000;
    }
  }
  r.errors = s.errors;
  r.dropped = s.dropped;
  r.windows = m.windows;
  r.stable = m.stable;
  r.answered_ok = m.answered_ok;
  r.answered_errors = m.answered_errors;
  return r;
}

bool SeveralConnections(const std::vector<Row>& rows) {
  std::set<int> seen;
  for (const Row& r : rows) {
    if (r.connections > 0) seen.insert(r.connections);
  }
  return seen.size() > 1;
}

int LabelWidth(const std::vector<Row>& rows) {
  size_t width = 16;
  bool labelled = false;
  for (const Row& r : rows) {
    labelled = labelled || !r.label.empty();
    width = std::max(width, r.Label().size());
  }
  return labelled ? static_cast<int>(width) : 16;
}

std::string FormatTableHeader(int label_width) {
  return absl::StrFormat(
      "%-*s %-9s %4s %9s %7s %9s %9s %9s %9s %9s %9s | %8s %8s %9s %8s %9s %5s %10s | %6s %s",
      label_width, "variant", "load", "conn", "req/s", "GB/s", "avg", "p50", "p90", "p95", "p99",
      "max", "queue", "upload", "compute", "download", "srv total", "batch", "transport", "stable",
      "errors");
}

std::string FormatTableRow(const Row& r, int label_width) {
  auto server = [&](double v) { return r.has_server_report ? FormatMicros(v) : std::string("-"); };
  std::string transport = r.has_server_report ? FormatMicros(r.client_other_us) : "-";
  if (r.vs_tcp > 0) transport += absl::StrFormat(" (%.2fxTCP)", r.vs_tcp);
  if (r.vs_grpc_echo > 0) transport += absl::StrFormat(" (%.2fxEcho)", r.vs_grpc_echo);
  return absl::StrFormat(
      "%-*s %-9s %4s %9.1f %7.3f %9s %9s %9s %9s %9s %9s | %8s %8s %9s %8s %9s %5s %10s | %6s %s",
      label_width, r.Label(), r.LoadText(), r.ConnectionsText(), r.requests_per_s, r.gbytes_per_s,
      FormatMicros(r.avg_us), FormatMicros(r.p50_us), FormatMicros(r.p90_us),
      FormatMicros(r.p95_us), FormatMicros(r.p99_us), FormatMicros(r.max_us), server(r.queue_us),
      server(r.upload_us), server(r.compute_us), server(r.download_us), server(r.server_total_us),
      BatchText(r), transport, r.stable ? "yes" : "no", r.ErrorsText());
}

std::string FormatWays(const std::vector<Row>& rows, int label_width) {
  std::string out;
  for (const Row& r : rows) {
    if (!r.has_ways) continue;
    if (out.empty()) {
      out =
          "\nwhere the mean call went (way in: sent -> the server took it; way out: answered -> "
          "read here; wall clocks, so one host's):\n";
    }
    absl::StrAppend(
        &out,
        absl::StrFormat("  %-*s %-9s %4s  in %9s  server %9s  out %9s\n", label_width, r.Label(),
                        r.LoadText(), r.ConnectionsText(), FormatMicros(r.way_in_us),
                        FormatMicros(r.server_total_us), FormatMicros(r.way_out_us)));
  }
  return out;
}

}  // namespace gpucompute::loadtest
