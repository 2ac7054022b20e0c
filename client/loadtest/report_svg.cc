#include "loadtest/report_svg.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loadtest/report_text.h"

namespace gpucompute::loadtest {

namespace {

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

}  // namespace

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

}  // namespace gpucompute::loadtest
