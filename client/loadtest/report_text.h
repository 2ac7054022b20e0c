// Text pieces the load test's renderings share (report.cc, report_csv.cc,
// report_html.cc, report_svg.cc).
#pragma once

#include <string>

#include "loadtest/report.h"

namespace gpucompute::loadtest {

// `s` escaped for HTML and SVG text and attributes.
std::string Html(const std::string& s);

// A number as %.6g.
std::string Num(double v);

// The mean server batch, "1.00"; "-" without a server report.
std::string BatchText(const Row& r);

}  // namespace gpucompute::loadtest
