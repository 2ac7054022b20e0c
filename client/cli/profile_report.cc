#include "profile_report.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpucompute::cli {
namespace {

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Above this a fraction of the roofline says more about the ceiling than
// about the kernel (the server notes it too).
constexpr double kSuspectFraction = 1.05;

constexpr char kStyle[] = R"(
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 70em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; } td, th { padding: 0.25em 0.8em; text-align: left; }
th { border-bottom: 1px solid #999; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg text { font-family: sans-serif; font-size: 12px; fill: #222; }
.bar-time { fill: #4a7ab8; } .bar-roof { fill: #5a9e5a; } .bar-suspect { fill: #d08a2c; }
.ceiling { stroke: #b33; stroke-dasharray: 4 3; } .note { color: #8a5a00; }
.muted { color: #666; }
)";

// One SVG of horizontal bars: one row per (label, value, text, class).
struct Bar {
  std::string label;
  double value;
  std::string text;
  std::string css;
};

std::string BarChart(const std::vector<Bar>& bars, double scale_max, double mark_at) {
  constexpr int kLabelW = 190, kBarW = 420, kTextW = 170, kRowH = 22;
  const int height = kRowH * int(bars.size()) + 8;
  std::string svg =
      absl::StrFormat("<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">\n",
                      kLabelW + kBarW + kTextW, height, kLabelW + kBarW + kTextW, height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = int(i) * kRowH + 4;
    const double w = scale_max > 0 ? std::clamp(b.value / scale_max, 0.0, 1.0) * kBarW : 0;
    absl::StrAppendFormat(&svg,
                          "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>"
                          "<rect class=\"%s\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\"/>"
                          "<text x=\"%.1f\" y=\"%d\">%s</text>\n",
                          kLabelW - 8, y + 14, Escape(b.label), b.css, kLabelW, y, std::max(w, 1.0),
                          kRowH - 6, kLabelW + std::max(w, 1.0) + 6, y + 14, Escape(b.text));
  }
  if (mark_at > 0 && scale_max > 0) {
    const double x = kLabelW + std::min(mark_at / scale_max, 1.0) * kBarW;
    absl::StrAppendFormat(&svg,
                          "<line class=\"ceiling\" x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"%d\"/>\n",
                          x, x, height);
  }
  svg += "</svg>\n";
  return svg;
}

// A counter's value, short: integers as such (with k/M/G above 10^4),
// ratios and percentages with two decimals.
std::string CounterValueText(double value) {
  const double a = std::abs(value);
  if (value == std::floor(value) && a >= 1e4) {
    if (a >= 1e9) return absl::StrFormat("%.2fG", value / 1e9);
    if (a >= 1e6) return absl::StrFormat("%.2fM", value / 1e6);
    return absl::StrFormat("%.1fk", value / 1e3);
  }
  if (value == std::floor(value)) return absl::StrFormat("%.0f", value);
  return absl::StrFormat("%.2f", value);
}

// The counters' metric names in the order rows give them, with unit and
// meaning (from the first row that has each).
struct CounterColumn {
  std::string name, unit, meaning;
};
std::vector<CounterColumn> CounterNames(const v1::ProfileResponse& response) {
  std::vector<CounterColumn> names;
  for (const v1::VariantProfile& v : response.variants()) {
    for (const v1::Counter& c : v.counters()) {
      if (std::none_of(names.begin(), names.end(),
                       [&](const CounterColumn& n) { return n.name == c.name(); }))
        names.push_back({c.name(), c.unit(), c.meaning()});
    }
  }
  return names;
}

const v1::Counter* FindCounter(const v1::VariantProfile& v, const std::string& name) {
  for (const v1::Counter& c : v.counters()) {
    if (c.name() == name) return &c;
  }
  return nullptr;
}

std::string CounterMove(const v1::Comparison& c) {
  if (c.counter().empty()) return "-";
  return absl::StrCat(CounterValueText(c.counter_before()), " -> ",
                      CounterValueText(c.counter_after()),
                      c.counter_as_predicted() ? " (as predicted)" : " (NOT as predicted)");
}

}  // namespace

std::string CountersText(const v1::ProfileResponse& response) {
  const std::vector<CounterColumn> names = CounterNames(response);
  if (names.empty()) return "";
  std::vector<const v1::VariantProfile*> rows;
  for (const v1::VariantProfile& v : response.variants()) {
    if (v.counters_size() > 0) rows.push_back(&v);
  }
  size_t name_w = 0;
  for (const CounterColumn& n : names) name_w = std::max(name_w, n.name.size() + n.unit.size() + 3);
  std::string out = "hardware counters (one launch each, read after the timed runs)\n";
  absl::StrAppendFormat(&out, "  %-*s", int(name_w), "counter (unit)");
  for (const v1::VariantProfile* v : rows)
    absl::StrAppendFormat(&out, "  %*s", int(std::max<size_t>(v->variant().size(), 9)),
                          v->variant());
  out += "\n";
  for (const CounterColumn& n : names) {
    absl::StrAppendFormat(&out, "  %-*s", int(name_w), absl::StrCat(n.name, " (", n.unit, ")"));
    for (const v1::VariantProfile* v : rows) {
      const v1::Counter* c = FindCounter(*v, n.name);
      absl::StrAppendFormat(&out, "  %*s", int(std::max<size_t>(v->variant().size(), 9)),
                            c ? CounterValueText(c->value()) : "-");
    }
    out += "\n";
  }
  out += "meanings:\n";
  for (const CounterColumn& n : names)
    absl::StrAppendFormat(&out, "  %-*s  %s\n", int(name_w), n.name, n.meaning);
  return out;
}

std::string ComparisonsText(const v1::ProfileResponse& response) {
  if (response.comparisons_size() == 0) return "";
  size_t idea_w = std::string("idea").size(), pair_w = std::string("before -> after").size();
  for (const v1::Comparison& c : response.comparisons()) {
    idea_w = std::max(idea_w, c.idea().size());
    pair_w = std::max(pair_w, c.before().size() + 4 + c.after().size());
  }
  std::string out = "comparisons (time ratio: before's median / after's; above 1, the idea paid)\n";
  absl::StrAppendFormat(&out, "  %-*s  %-*s  %10s  %s\n", int(idea_w), "idea", int(pair_w),
                        "before -> after", "time ratio", "lesson");
  bool any_counter = false;
  for (const v1::Comparison& c : response.comparisons()) {
    absl::StrAppendFormat(&out, "  %-*s  %-*s  %9.2fx  %s\n", int(idea_w), c.idea(), int(pair_w),
                          absl::StrCat(c.before(), " -> ", c.after()), c.time_ratio(), c.lesson());
    any_counter |= !c.counter().empty();
  }
  if (any_counter) {
    out += "the counter that explains each (before -> after)\n";
    for (const v1::Comparison& c : response.comparisons()) {
      absl::StrAppendFormat(&out, "  %-*s  %s  %s\n", int(idea_w), c.idea(),
                            c.counter().empty() ? "-" : c.counter(), CounterMove(c));
    }
  }
  return out;
}

std::string NotesText(const v1::ProfileResponse& response) {
  size_t width = 0;
  for (const v1::VariantProfile& v : response.variants()) {
    if (!v.note().empty()) width = std::max(width, v.variant().size());
  }
  if (width == 0) return "";
  std::string out = "notes:\n";
  for (const v1::VariantProfile& v : response.variants()) {
    if (!v.note().empty())
      absl::StrAppendFormat(&out, "  %-*s  %s\n", int(width), v.variant(), v.note());
  }
  return out;
}

std::string ProfileHtml(const std::string& what, const v1::ProfileResponse& response) {
  std::string html = absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>gpucompute profile: ",
      Escape(what), "</title>\n<style>", kStyle, "</style>\n</head>\n<body>\n",
      "<h1>gpucompute profile: ", Escape(what), "</h1>\n");

  // The ladder: time per variant, then fraction of the roofline.
  std::vector<Bar> times, fractions;
  double max_us = 0, max_fraction = 1.0;
  for (const v1::VariantProfile& v : response.variants()) {
    if (!v.ok()) continue;
    max_us = std::max(max_us, v.median_us());
    max_fraction = std::max(max_fraction, v.fraction_of_roofline());
  }
  for (const v1::VariantProfile& v : response.variants()) {
    if (!v.ok()) continue;
    times.push_back({v.variant(), v.median_us(),
                     absl::StrFormat("%.1f us  (%.1f GB/s, %.1f GFLOP/s)", v.median_us(),
                                     v.gbytes_per_s(), v.gflops()),
                     "bar-time"});
    const bool suspect = v.fraction_of_roofline() > kSuspectFraction;
    fractions.push_back({v.variant(), v.fraction_of_roofline(),
                         absl::StrFormat("%.1f%%%s", 100.0 * v.fraction_of_roofline(),
                                         suspect ? "  (ceiling suspect)" : ""),
                         suspect ? "bar-suspect" : "bar-roof"});
  }
  html += "<h2>Variants: median time (fastest first)</h2>\n";
  if (times.empty()) {
    html += "<p>No variant ran ok.</p>\n";
  } else {
    html += BarChart(times, max_us, 0);
    html +=
        "<h2>Fraction of the roofline</h2>\n"
        "<p class=\"muted\">The dashed line is 100% of the device's measured ceiling.</p>\n";
    html += BarChart(fractions, max_fraction, 1.0);
  }
  bool any_failed = false;
  for (const v1::VariantProfile& v : response.variants()) any_failed |= !v.ok();
  if (any_failed) {
    html += "<h2>Failed or skipped</h2>\n<table>\n<tr><th>variant</th><th>why</th></tr>\n";
    for (const v1::VariantProfile& v : response.variants()) {
      if (!v.ok()) {
        absl::StrAppend(&html, "<tr><td>", Escape(v.variant()), "</td><td>", Escape(v.error()),
                        "</td></tr>\n");
      }
    }
    html += "</table>\n";
  }

  html += "<h2>Comparisons: the lessons, measured</h2>\n";
  if (response.comparisons_size() == 0) {
    html +=
        "<p class=\"muted\">None: no pair of variants that differ by one idea both ran ok "
        "here (a CPU server has one variant per op).</p>\n";
  } else {
    html +=
        "<p class=\"muted\">Time ratio: the median of the variant without the idea over the "
        "median of the one with it; above 1, the idea paid.</p>\n"
        "<table>\n<tr><th>idea</th><th>before &rarr; after</th><th>time ratio</th>"
        "<th>counter</th><th>counter before &rarr; after</th><th>lesson</th></tr>\n";
    for (const v1::Comparison& c : response.comparisons()) {
      absl::StrAppend(&html, "<tr><td>", Escape(c.idea()), "</td><td>", Escape(c.before()),
                      " &rarr; ", Escape(c.after()), "</td><td class=\"num\">",
                      absl::StrFormat("%.2fx", c.time_ratio()), "</td><td><code>",
                      Escape(c.counter().empty() ? "-" : c.counter()), "</code></td><td class=\"",
                      !c.counter().empty() && !c.counter_as_predicted() ? "note" : "num", "\">",
                      Escape(CounterMove(c)), "</td><td>", Escape(c.lesson()), "</td></tr>\n");
    }
    html += "</table>\n";
  }

  if (const std::vector<CounterColumn> names = CounterNames(response); !names.empty()) {
    html +=
        "<h2>Hardware counters</h2>\n<p class=\"muted\">One launch of each variant, replayed "
        "under the profiler after the timed runs (Nsight Compute's metric names).</p>\n"
        "<table>\n<tr><th>counter</th><th>unit</th>";
    std::vector<const v1::VariantProfile*> rows;
    for (const v1::VariantProfile& v : response.variants()) {
      if (v.counters_size() == 0) continue;
      rows.push_back(&v);
      absl::StrAppend(&html, "<th>", Escape(v.variant()), "</th>");
    }
    html += "</tr>\n";
    for (const CounterColumn& n : names) {
      // The meaning under the name, so the variants' columns keep the width.
      absl::StrAppend(&html, "<tr><td><code>", Escape(n.name), "</code><br><span class=\"muted\">",
                      Escape(n.meaning), "</span></td><td>", Escape(n.unit), "</td>");
      for (const v1::VariantProfile* v : rows) {
        const v1::Counter* c = FindCounter(*v, n.name);
        absl::StrAppend(&html, "<td class=\"num\">", c ? Escape(CounterValueText(c->value())) : "-",
                        "</td>");
      }
      html += "</tr>\n";
    }
    html += "</table>\n";
  }

  bool any_note = false;
  for (const v1::VariantProfile& v : response.variants()) any_note |= !v.note().empty();
  if (any_note) {
    html += "<h2>Notes</h2>\n<table>\n<tr><th>variant</th><th>note</th></tr>\n";
    for (const v1::VariantProfile& v : response.variants()) {
      if (!v.note().empty()) {
        absl::StrAppend(&html, "<tr><td>", Escape(v.variant()), "</td><td class=\"note\">",
                        Escape(v.note()), "</td></tr>\n");
      }
    }
    html += "</table>\n";
  }

  html += "<h2>Device and ceilings</h2>\n<table>\n";
  auto row = [&](const std::string& key, const std::string& value) {
    absl::StrAppend(&html, "<tr><th>", Escape(key), "</th><td>", Escape(value), "</td></tr>\n");
  };
  row("device", response.device());
  row("copy bandwidth",
      absl::StrFormat("%.1f GB/s (bytes read + written)", response.peak_gbytes_per_s()));
  if (response.peak_read_gbytes_per_s() > 0) {
    row("read bandwidth", absl::StrFormat("%.1f GB/s (bytes read; reduce is held to it)",
                                          response.peak_read_gbytes_per_s()));
  }
  row("arithmetic", absl::StrFormat("%.1f GFLOP/s", response.peak_gflops()));
  if (response.peak_gflops_tf32() > 0) {
    row("TF32 tensor cores", absl::StrFormat("%.1f GFLOP/s", response.peak_gflops_tf32()));
  }
  row("caches", response.cold_cache() ? "cold: the last-level cache flushed before each timed run"
                                      : "warm: each timed run follows the previous one");
  row("auto selects", response.selected().empty() ? "-" : response.selected());
  row("inputs seed", absl::StrFormat("%" PRIu64, response.seed()));
  html += "</table>\n</body>\n</html>\n";
  return html;
}

absl::Status WriteProfileHtml(const std::string& path, const std::string& what,
                              const v1::ProfileResponse& response) {
  const std::string page = ProfileHtml(what, response);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("--html: cannot open ", path, ": ", std::strerror(errno)));
  }
  const bool written = std::fwrite(page.data(), 1, page.size(), f) == page.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    return absl::UnavailableError(absl::StrCat("--html: cannot write ", path, ": ",
                                               std::strerror(written ? errno : write_errno)));
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::cli
