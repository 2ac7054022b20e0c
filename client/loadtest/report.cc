#include "loadtest/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include <google/protobuf/util/json_util.h>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpucompute::loadtest {
namespace {

double Us(int64_t ns) { return ns / 1000.0; }

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

// Free text as one CSV field: quoted when it holds a comma, quote or line break.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

// The mean server batch, "1.00"; "-" without a server report.
std::string BatchText(const Row& r) {
  return r.has_server_report && r.batch > 0 ? absl::StrFormat("%.2f", r.batch) : std::string("-");
}

// ---- SVG charts ----------------------------------------------------------

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#393b79"};

struct Point {
  double x, y;
  std::string label;
};
struct Series {
  std::string name;
  std::string color;
  bool dashed = false;
  std::vector<Point> points;
};

class Axis {
 public:
  Axis(double lo, double hi, double pixels_lo, double pixels_hi) : p0_(pixels_lo), p1_(pixels_hi) {
    if (!(hi > lo)) {
      lo = lo > 0 ? lo / 2 : 0;
      hi = hi > 0 ? hi * 2 : 1;
    }
    log_ = lo > 0 && hi / lo > 20;
    if (log_) {
      lo_ = std::pow(10, std::floor(std::log10(lo)));
      hi_ = std::pow(10, std::ceil(std::log10(hi)));
    } else {
      const double step = NiceStep((hi - std::min(lo, 0.0)) / 5);
      lo_ = 0;
      hi_ = std::ceil(hi / step) * step;
    }
  }

  double Map(double v) const {
    double t = log_ ? (std::log10(std::max(v, lo_)) - std::log10(lo_)) /
                          (std::log10(hi_) - std::log10(lo_))
                    : (v - lo_) / (hi_ - lo_);
    return p0_ + t * (p1_ - p0_);
  }

  std::vector<double> Ticks() const {
    std::vector<double> ticks;
    if (log_) {
      const bool fine = hi_ / lo_ <= 1000;
      for (double d = lo_; d <= hi_ * 1.0001; d *= 10) {
        ticks.push_back(d);
        if (fine && d * 2 < hi_) ticks.push_back(d * 2);
        if (fine && d * 5 < hi_) ticks.push_back(d * 5);
      }
    } else {
      const double step = NiceStep((hi_ - lo_) / 5);
      for (double v = lo_; v <= hi_ * 1.0001; v += step) ticks.push_back(v);
    }
    return ticks;
  }

  bool log() const { return log_; }

 private:
  static double NiceStep(double raw) {
    if (raw <= 0) return 1;
    const double mag = std::pow(10, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0}) {
      if (raw <= m * mag) return m * mag;
    }
    return 10 * mag;
  }

  double lo_ = 0, hi_ = 1, p0_, p1_;
  bool log_ = false;
};

std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series) {
  // The legend on the right widens for long series names (about 7 px a
  // character), the plot keeping its size.
  size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const double kRight = std::max(190.0, 54 + 7.0 * longest), kW = 570 + kRight;
  constexpr double kH = 430, kLeft = 80, kTop = 36, kBottom = 56;
  double xmin = INFINITY, xmax = 0, ymin = INFINITY, ymax = 0;
  for (const Series& s : series) {
    for (const Point& p : s.points) {
      if (p.x > 0) xmin = std::min(xmin, p.x), xmax = std::max(xmax, p.x);
      if (p.y > 0) ymin = std::min(ymin, p.y), ymax = std::max(ymax, p.y);
    }
  }
  if (xmax == 0 || ymax == 0) return "";
  Axis x(xmin, xmax, kLeft, kW - kRight);
  Axis y(ymin, ymax, kH - kBottom, kTop);

  std::string svg = absl::StrFormat(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" )"
      R"(font-family="sans-serif" font-size="12">)"
      "\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      R"(<text x="%g" y="20" font-size="15" font-weight="bold">%s</text>)"
      "\n",
      kW, kH, kW, kH, kLeft, Html(title));
  for (double t : x.Ticks()) {
    const double px = x.Map(t);
    absl::StrAppendFormat(&svg,
                          R"(<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>)"
                          R"(<text x="%.1f" y="%g" text-anchor="middle">%s</text>)"
                          "\n",
                          px, kTop, px, kH - kBottom, px, kH - kBottom + 16, Num(t));
  }
  for (double t : y.Ticks()) {
    const double py = y.Map(t);
    absl::StrAppendFormat(&svg,
                          R"(<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>)"
                          R"(<text x="%g" y="%.1f" text-anchor="end">%s</text>)"
                          "\n",
                          kLeft, py, kW - kRight, py, kLeft - 6, py + 4, Num(t));
  }
  absl::StrAppendFormat(
      &svg,
      R"(<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>)"
      R"(<text x="%g" y="%g" text-anchor="middle">%s%s</text>)"
      R"svg(<text transform="translate(18 %g) rotate(-90)" text-anchor="middle">%s%s</text>)svg"
      "\n",
      kLeft, kTop, kW - kRight - kLeft, kH - kBottom - kTop, (kLeft + kW - kRight) / 2, kH - 14,
      Html(x_label), x.log() ? " (log scale)" : "", (kTop + kH - kBottom) / 2, Html(y_label),
      y.log() ? " (log scale)" : "");
  int legend = 0;
  for (const Series& s : series) {
    std::string path;
    for (const Point& p : s.points) {
      if (p.x <= 0 || p.y <= 0) continue;
      absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "" : " ", x.Map(p.x), y.Map(p.y));
    }
    absl::StrAppendFormat(&svg,
                          R"(<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>)"
                          "\n",
                          path, s.color, s.dashed ? R"( stroke-dasharray="6 4")" : "");
    for (const Point& p : s.points) {
      if (p.x <= 0 || p.y <= 0) continue;
      absl::StrAppendFormat(
          &svg,
          R"(<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s %s: %s req/s, %s ms</title></circle>)"
          R"(<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text>)"
          "\n",
          x.Map(p.x), y.Map(p.y), s.color, Html(s.name), Html(p.label), Num(p.x), Num(p.y),
          x.Map(p.x) + 5, y.Map(p.y) - 5, s.color, Html(p.label));
    }
    const double ly = kTop + 8 + 18 * legend++;
    absl::StrAppendFormat(
        &svg,
        R"(<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"%s/>)"
        R"(<text x="%g" y="%g">%s</text>)"
        "\n",
        kW - kRight + 14, ly, kW - kRight + 40, ly, s.color,
        s.dashed ? R"( stroke-dasharray="6 4")" : "", kW - kRight + 46, ly + 4, Html(s.name));
  }
  return svg + "</svg>\n";
}

// Where each row's client-seen average latency goes: the server's stages and
// what remains for transport, serialization and the client.
std::string BreakdownChart(const std::vector<Row>& rows) {
  std::vector<const Row*> shown;
  for (const Row& r : rows) {
    if (r.requests > 0) shown.push_back(&r);
  }
  if (shown.empty()) return "";
  const bool several_connections = SeveralConnections(rows);
  // Each bar's name, on the left, widens that margin when long.
  std::vector<std::string> names;
  size_t longest = 0;
  for (const Row* r : shown) {
    std::string load = r->LoadText();
    if (several_connections && r->connections > 0) absl::StrAppend(&load, " conn=", r->connections);
    names.push_back(absl::StrCat(r->Label(), " ", load, " (", FormatMicros(r->avg_us), ")"));
    longest = std::max(longest, names.back().size());
  }
  const double kLeft = std::max(210.0, 16 + 7.0 * longest), kW = 690 + kLeft;
  constexpr double kRight = 20, kBar = 16, kGap = 6, kTop = 54;
  const double height = kTop + shown.size() * (kBar + kGap) + 40;
  struct Part {
    const char* name;
    const char* color;
  };
  const Part parts[] = {{"queue", "#9467bd"},        {"upload", "#1f77b4"},
                        {"compute", "#2ca02c"},      {"download", "#17becf"},
                        {"other server", "#bcbd22"}, {"transport + client", "#d62728"}};
  std::string svg = absl::StrFormat(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">)"
      "\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      R"(<text x="10" y="20" font-size="15" font-weight="bold">Where the average latency goes (share of client-seen avg)</text>)"
      "\n",
      kW, height);
  double lx = kLeft;
  for (const Part& p : parts) {
    absl::StrAppendFormat(
        &svg,
        R"(<rect x="%g" y="30" width="12" height="12" fill="%s"/><text x="%g" y="40">%s</text>)",
        lx, p.color, lx + 16, p.name);
    lx += 16 + 8 * std::string(p.name).size() + 18;
  }
  svg += "\n";
  double y = kTop;
  for (size_t row = 0; row < shown.size(); ++row) {
    const Row* r = shown[row];
    double values[6] = {0, 0, 0, 0, 0, r->avg_us};
    if (r->has_server_report) {
      values[0] = r->queue_us;
      values[1] = r->upload_us;
      values[2] = r->compute_us;
      values[3] = r->download_us;
      values[4] = std::max(
          0.0, r->server_total_us - r->queue_us - r->upload_us - r->compute_us - r->download_us);
      values[5] = std::max(0.0, r->avg_us - r->server_total_us);
    }
    double total = 0;
    for (double v : values) total += v;
    absl::StrAppendFormat(&svg, R"(<text x="%g" y="%g" text-anchor="end">%s</text>)", kLeft - 6,
                          y + 12, Html(names[row]));
    double x = kLeft;
    for (int i = 0; i < 6; ++i) {
      if (total <= 0 || values[i] <= 0) continue;
      const double w = values[i] / total * (kW - kLeft - kRight);
      absl::StrAppendFormat(
          &svg,
          R"(<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s"><title>%s: %s</title></rect>)",
          x, y, w, kBar, parts[i].color, parts[i].name, Html(FormatMicros(values[i])));
      x += w;
    }
    svg += "\n";
    y += kBar + kGap;
  }
  return svg + "</svg>\n";
}

}  // namespace

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

std::string ToCsv(const std::vector<Row>& rows) {
  std::string out =
      "variant,mode,concurrency,rate,payload_bytes,requests,seconds,requests_per_s,gbytes_per_s,"
      "avg_us,p50_us,p90_us,p95_us,p99_us,max_us,server_queue_us,server_upload_us,"
      "server_compute_us,server_download_us,server_total_us,client_other_us,vs_tcp,vs_grpc_echo,"
      "errors,dropped,"
      "windows,stable,placement,connections,batch,label\n";
  for (const Row& r : rows) {
    auto server = [&](double v) { return r.has_server_report ? Num(v) : std::string(); };
    std::vector<std::string> errors;  // joined with ';' to stay one CSV field
    for (const auto& [code, count] : r.errors) errors.push_back(absl::StrCat(code, ":", count));
    const std::vector<std::string> fields = {r.variant,
                                             r.mode,
                                             absl::StrCat(r.concurrency),
                                             Num(r.rate),
                                             absl::StrCat(r.payload_bytes),
                                             absl::StrCat(r.requests),
                                             Num(r.seconds),
                                             Num(r.requests_per_s),
                                             Num(r.gbytes_per_s),
                                             Num(r.avg_us),
                                             Num(r.p50_us),
                                             Num(r.p90_us),
                                             Num(r.p95_us),
                                             Num(r.p99_us),
                                             Num(r.max_us),
                                             server(r.queue_us),
                                             server(r.upload_us),
                                             server(r.compute_us),
                                             server(r.download_us),
                                             server(r.server_total_us),
                                             server(r.client_other_us),
                                             r.vs_tcp > 0 ? Num(r.vs_tcp) : "",
                                             r.vs_grpc_echo > 0 ? Num(r.vs_grpc_echo) : "",
                                             absl::StrJoin(errors, ";"),
                                             absl::StrCat(r.dropped),
                                             absl::StrCat(r.windows),
                                             r.stable ? "true" : "false",
                                             r.placement,
                                             absl::StrCat(r.connections),
                                             r.has_server_report && r.batch > 0 ? Num(r.batch) : "",
                                             CsvField(r.label)};
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
  }
  return out;
}

tools::v1::LoadtestReport ToReport(const RunInfo& info, const std::vector<Row>& rows) {
  tools::v1::LoadtestReport report;
  report.set_server(info.server);
  report.set_server_version(info.server_version);
  report.set_backend(info.backend);
  for (const std::string& d : info.devices) report.add_devices(d);
  report.set_op(info.op);
  report.set_dtype(info.dtype);
  report.set_shape(info.shape);
  report.set_shape_meaning(info.shape_meaning);
  report.set_reduce(info.reduce);
  report.set_request_payload_bytes(static_cast<double>(info.request_payload_bytes));
  report.set_response_payload_bytes(static_cast<double>(info.response_payload_bytes));
  report.set_started(info.started);
  report.set_settings(info.settings);
  report.set_placement(info.placement);
  for (const RunInfo::Source& source : info.merged) report.add_merged_from(source.file);
  for (const Row& r : rows) {
    tools::v1::LoadtestReport::Row* out = report.add_rows();
    out->set_variant(r.variant);
    out->set_placement(r.placement);
    out->set_connections(r.connections);
    out->set_label(r.label);
    out->set_mode(r.mode);
    out->set_concurrency(r.concurrency);
    out->set_rate(r.rate);
    out->set_payload_bytes(static_cast<double>(r.payload_bytes));
    out->set_requests(static_cast<int32_t>(r.requests));
    out->set_seconds(r.seconds);
    out->set_requests_per_s(r.requests_per_s);
    out->set_gbytes_per_s(r.gbytes_per_s);
    auto* latency = out->mutable_latency_us();
    latency->set_avg(r.avg_us);
    latency->set_p50(r.p50_us);
    latency->set_p90(r.p90_us);
    latency->set_p95(r.p95_us);
    latency->set_p99(r.p99_us);
    latency->set_max(r.max_us);
    if (r.has_server_report) {
      auto* server = out->mutable_server_us();
      server->set_queue(r.queue_us);
      server->set_upload(r.upload_us);
      server->set_compute(r.compute_us);
      server->set_download(r.download_us);
      server->set_total(r.server_total_us);
      out->set_client_other_us(r.client_other_us);
      if (r.batch > 0) out->set_batch(r.batch);
    }
    if (r.vs_tcp > 0) out->set_vs_tcp(r.vs_tcp);
    if (r.vs_grpc_echo > 0) out->set_vs_grpc_echo(r.vs_grpc_echo);
    for (const auto& [code, count] : r.errors) (*out->mutable_errors())[code] = int32_t(count);
    out->set_dropped(static_cast<int32_t>(r.dropped));
    out->set_windows(r.windows);
    out->set_stable(r.stable);
    out->mutable_answered()->set_ok(static_cast<int32_t>(r.answered_ok));
    for (const auto& [code, count] : r.answered_errors) {
      (*out->mutable_answered()->mutable_errors())[code] = int32_t(count);
    }
  }
  return report;
}

absl::StatusOr<std::string> ToJson(const RunInfo& info, const std::vector<Row>& rows) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;  // every key, zeros included
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed =
      google::protobuf::util::MessageToJsonString(ToReport(info, rows), &json, options);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("printing the JSON report: ", printed.ToString()));
  }
  return json;
}

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

absl::StatusOr<RunReport> FromJson(const std::string& json) {
  tools::v1::LoadtestReport report;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // a report from a later version
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &report, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a load-test JSON report: ", parsed.ToString()));
  }
  RunReport run;
  RunInfo& info = run.info;
  info.server = report.server();
  info.server_version = report.server_version();
  info.backend = report.backend();
  info.devices.assign(report.devices().begin(), report.devices().end());
  info.op = report.op();
  info.dtype = report.dtype();
  info.shape = report.shape();
  info.shape_meaning = report.shape_meaning();
  info.reduce = report.reduce();
  info.request_payload_bytes = static_cast<int64_t>(report.request_payload_bytes());
  info.response_payload_bytes = static_cast<int64_t>(report.response_payload_bytes());
  info.started = report.started();
  info.settings = report.settings();
  info.placement = report.placement().empty() ? "inline" : report.placement();
  for (const tools::v1::LoadtestReport::Row& in : report.rows()) {
    Row r;
    r.variant = in.variant();
    r.mode = in.mode();
    r.concurrency = in.concurrency();
    r.rate = in.rate();
    r.payload_bytes = static_cast<int64_t>(in.payload_bytes());
    r.requests = in.requests();
    r.seconds = in.seconds();
    r.requests_per_s = in.requests_per_s();
    r.gbytes_per_s = in.gbytes_per_s();
    r.avg_us = in.latency_us().avg();
    r.p50_us = in.latency_us().p50();
    r.p90_us = in.latency_us().p90();
    r.p95_us = in.latency_us().p95();
    r.p99_us = in.latency_us().p99();
    r.max_us = in.latency_us().max();
    r.has_server_report = in.has_server_us();
    r.queue_us = in.server_us().queue();
    r.upload_us = in.server_us().upload();
    r.compute_us = in.server_us().compute();
    r.download_us = in.server_us().download();
    r.server_total_us = in.server_us().total();
    r.client_other_us = in.client_other_us();
    r.batch = in.batch();
    r.errors.insert(in.errors().begin(), in.errors().end());
    r.dropped = in.dropped();
    r.answered_ok = in.answered().ok();
    r.answered_errors.insert(in.answered().errors().begin(), in.answered().errors().end());
    r.windows = in.windows();
    r.stable = in.stable();
    r.vs_tcp = in.vs_tcp();
    r.vs_grpc_echo = in.vs_grpc_echo();
    r.placement = in.placement().empty() ? "inline" : in.placement();
    r.connections = in.connections();
    r.label = in.label();
    run.rows.push_back(std::move(r));
  }
  return run;
}

absl::StatusOr<RunReport> MergeRuns(const std::vector<std::string>& files,
                                    std::vector<RunReport> runs) {
  if (runs.empty() || runs.size() != files.size()) {
    return absl::InvalidArgumentError("--merge_json: name at least one --json file");
  }
  auto workload = [](const RunInfo& i) {
    return absl::StrCat(i.op, " ", i.shape, " ", i.dtype, i.reduce.empty() ? "" : " ", i.reduce);
  };
  // Distinct values in the order met, joined.
  auto distinct = [&runs](const std::function<std::string(const RunInfo&)>& field,
                          const std::string& separator) {
    std::vector<std::string> values;
    for (const RunReport& run : runs) {
      const std::string v = field(run.info);
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    return absl::StrJoin(values, separator);
  };
  RunReport merged;
  merged.info = runs.front().info;
  for (size_t i = 1; i < runs.size(); ++i) {
    if (workload(runs[i].info) != workload(merged.info)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--merge_json: ", files[i], " measured ", workload(runs[i].info), ", ",
                       files[0], " ", workload(merged.info), "; merge runs of one workload"));
    }
  }
  merged.info.server = distinct([](const RunInfo& i) { return i.server; }, ", ");
  merged.info.server_version = distinct([](const RunInfo& i) { return i.server_version; }, ", ");
  merged.info.backend = distinct([](const RunInfo& i) { return i.backend; }, ", ");
  merged.info.settings = distinct([](const RunInfo& i) { return i.settings; }, " | ");
  merged.info.devices.clear();
  std::vector<std::string> placements;
  for (const RunReport& run : runs) {
    for (const std::string& d : run.info.devices) {
      if (std::find(merged.info.devices.begin(), merged.info.devices.end(), d) ==
          merged.info.devices.end()) {
        merged.info.devices.push_back(d);
      }
    }
    for (absl::string_view p : absl::StrSplit(run.info.placement, ',', absl::SkipEmpty())) {
      if (std::find(placements.begin(), placements.end(), p) == placements.end()) {
        placements.emplace_back(p);
      }
    }
  }
  merged.info.placement = absl::StrJoin(placements, ",");
  merged.info.merged.clear();
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string name = std::filesystem::path(files[i]).stem().string();
    for (size_t j = 0; j < files.size(); ++j) {
      if (j != i && std::filesystem::path(files[j]).stem().string() == name) name = files[i];
    }
    std::vector<std::string> labels;
    for (Row& r : runs[i].rows) {
      if (r.label.empty() && runs.size() > 1) r.label = name;
      if (!r.label.empty() && std::find(labels.begin(), labels.end(), r.label) == labels.end()) {
        labels.push_back(r.label);
      }
      merged.rows.push_back(std::move(r));
    }
    const RunInfo& in = runs[i].info;
    merged.info.merged.push_back({files[i], absl::StrJoin(labels, ", "), in.server,
                                  in.server_version, in.backend, in.started, in.settings});
  }
  return merged;
}

}  // namespace gpucompute::loadtest
