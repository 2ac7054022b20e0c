// The load test's run as one self-contained HTML page (--html).
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loadtest/report.h"
#include "loadtest/report_svg.h"
#include "loadtest/report_text.h"

namespace gpucompute::loadtest {

std::string ToHtml(const RunInfo& info, const std::vector<Row>& rows) {
  // One series per variant and mode (and connections, when the rows ran at
  // several), in the order the rows ran.
  const bool several_connections = SeveralConnections(rows);
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Row*>> by_series;
  for (const Row& r : rows) {
    std::string key = r.Label();
    if (several_connections && r.connections > 0) absl::StrAppend(&key, " conn=", r.connections);
    if (r.mode == "open") key += " (open loop)";
    if (!by_series.contains(key)) order.push_back(key);
    by_series[key].push_back(&r);
  }
  auto curves = [&](double Row::*latency) {
    std::vector<Series> series;
    for (size_t i = 0; i < order.size(); ++i) {
      Series s;
      s.name = order[i];
      s.color = kPalette[i % std::size(kPalette)];
      s.dashed = IsBaseline(by_series[order[i]].front()->variant) ||
                 order[i].find("(open loop)") != std::string::npos;
      for (const Row* r : by_series[order[i]]) {
        if (r->requests > 0)
          s.points.push_back({r->requests_per_s, r->*latency / 1000, r->LoadText()});
      }
      series.push_back(std::move(s));
    }
    return series;
  };

  std::string html = absl::StrFormat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      "<title>gpucompute load test: %s %s %s</title>\n"
      "<style>body{font-family:sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse;font-size:13px}"
      "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}"
      "th{background:#f3f3f3}td:first-child,td:nth-child(2){text-align:left}"
      ".unstable{color:#b00}.charts svg{margin:8px 12px 8px 0;border:1px solid #eee}"
      "dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px}dt{font-weight:bold}"
      "</style></head><body>\n"
      "<h1>gpucompute load test</h1>\n<dl>"
      "<dt>workload</dt><dd>%s %s %s (%s)%s</dd>"
      "<dt>payload per request</dt><dd>%d bytes sent, %d bytes received</dd>"
      "<dt>server</dt><dd>%s: version %s, backend %s, %s</dd>"
      "<dt>started</dt><dd>%s</dd><dt>measurement</dt><dd>%s</dd></dl>\n",
      Html(info.op), Html(info.shape), Html(info.dtype), Html(info.op), Html(info.shape),
      Html(info.dtype), Html(info.shape_meaning),
      info.reduce.empty() ? "" : Html(absl::StrCat(", reduce ", info.reduce)),
      info.request_payload_bytes, info.response_payload_bytes, Html(info.server),
      Html(info.server_version), Html(info.backend), Html(absl::StrJoin(info.devices, "; ")),
      Html(info.started), Html(info.settings));
  if (!info.merged.empty()) {
    html +=
        "<h2>Runs merged</h2>\n<table>\n<tr><th>file</th><th>labels</th><th>server</th>"
        "<th>version, backend</th><th>started</th><th>measurement</th></tr>\n";
    for (const RunInfo::Source& s : info.merged) {
      html += "<tr>";
      for (const std::string& cell :
           {s.file, s.labels, s.server, absl::StrCat(s.server_version, ", ", s.backend), s.started,
            s.settings}) {
        absl::StrAppend(&html, "<td style=\"text-align:left\">", Html(cell), "</td>");
      }
      html += "</tr>\n";
    }
    html += "</table>\n";
  }
  html += "<div class=\"charts\">\n";
  html += LineChart("p95 latency vs throughput", "throughput (requests/s)", "p95 latency (ms)",
                    curves(&Row::p95_us));
  html += LineChart("p50 latency vs throughput", "throughput (requests/s)", "p50 latency (ms)",
                    curves(&Row::p50_us));
  html += "</div>\n<div class=\"charts\">\n" + BreakdownChart(rows) + "</div>\n";
  html +=
      "<h2>Rows</h2>\n<p>Latency is client-seen, from issue (open loop: the scheduled arrival) "
      "to the parsed response. Server columns are averages of the server's ExecutionReport "
      "(<em>batch</em>: how many requests ran as one batch with each, 1 when alone); "
      "<em>transport</em> is the client-seen average minus the server's total: the network, "
      "serialization and the client. GB/s counts the matrix payload both ways; xTCP compares "
      "it with the loopback echo at the same concurrency (TCP; a unix socket, row unix_echo, "
      "when the target is one); xEcho compares an inline row's req/s with grpc_echo's at the "
      "same concurrency and connections: the op's own request and response through a gRPC "
      "server that does no work.</p>\n<table>\n<tr>";
  for (const char* h :
       {"variant", "load",      "conn", "req/s", "GB/s",     "avg",     "p50",      "p90",
        "p95",     "p99",       "max",  "queue", "upload",   "compute", "download", "server total",
        "batch",   "transport", "xTCP", "xEcho", "requests", "errors",  "stable"}) {
    absl::StrAppend(&html, "<th>", h, "</th>");
  }
  html += "</tr>\n";
  for (const Row& r : rows) {
    auto server = [&](double v) {
      return r.has_server_report ? FormatMicros(v) : std::string("-");
    };
    html += r.stable ? "<tr>" : "<tr class=\"unstable\">";
    for (const std::string& cell :
         {r.Label(),
          r.LoadText(),
          r.ConnectionsText(),
          absl::StrFormat("%.1f", r.requests_per_s),
          absl::StrFormat("%.3f", r.gbytes_per_s),
          FormatMicros(r.avg_us),
          FormatMicros(r.p50_us),
          FormatMicros(r.p90_us),
          FormatMicros(r.p95_us),
          FormatMicros(r.p99_us),
          FormatMicros(r.max_us),
          server(r.queue_us),
          server(r.upload_us),
          server(r.compute_us),
          server(r.download_us),
          server(r.server_total_us),
          BatchText(r),
          server(r.client_other_us),
          r.vs_tcp > 0 ? absl::StrFormat("%.2f", r.vs_tcp) : std::string("-"),
          r.vs_grpc_echo > 0 ? absl::StrFormat("%.2f", r.vs_grpc_echo) : std::string("-"),
          absl::StrCat(r.requests),
          r.ErrorsText(),
          std::string(r.stable ? "yes" : "no")}) {
      absl::StrAppend(&html, "<td>", Html(cell), "</td>");
    }
    html += "</tr>\n";
  }
  html +=
      "</table>\n<p>Rows in red did not reach stable throughput and p95 within the time "
      "limit.</p>\n</body></html>\n";
  return html;
}

}  // namespace gpucompute::loadtest
