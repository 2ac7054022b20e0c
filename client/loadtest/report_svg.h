// The SVG charts of the load test's HTML report (report_html.cc): latency
// against throughput per series, and where each row's latency goes.
#pragma once

#include <string>
#include <vector>

#include "loadtest/report.h"

namespace gpucompute::loadtest {

// The series' colours, in order; they repeat after the last.
inline constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
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

// A line chart of the series, with their legend on the right.
std::string LineChart(const std::string& title, const std::string& x_label,
                      const std::string& y_label, const std::vector<Series>& series);

// Where each row's client-seen average latency goes: the server's stages and
// what remains for transport, serialization and the client.
std::string BreakdownChart(const std::vector<Row>& rows);

}  // namespace gpucompute::loadtest
