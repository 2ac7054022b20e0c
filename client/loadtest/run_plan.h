// The rows a run measures, in order, and the description of the run printed
// above them (and kept in the --json and --html reports).
#pragma once

#include <string>
#include <vector>

#include "gpucompute/client.h"
#include "loadtest/load.h"
#include "loadtest/report.h"
#include "loadtest/run_options.h"

namespace gpucompute::loadtest {

// One row to measure.
struct Plan {
  std::string variant;  // or a baseline (report.h); or "upload", "download"
  int concurrency = 0;  // closed loop; 0: open loop at `rate`
  double rate = 0;
  std::string placement = "inline";
  int connections = 0;  // the client whose channels carry the row; 0: the echo
};

// The baselines first, at each concurrency, then every placement's variants
// at each --connections value, closed loop then open loop. Against a
// unix-socket `target` the socket echo's row is unix_echo.
std::vector<Plan> MakePlan(const RunOptions& run, const std::vector<std::string>& variants,
                           const std::string& target);

// The width of the table's first column, fitting every row's label.
int LabelWidth(const std::vector<Plan>& plan, const std::string& label);

// The run as the reports describe it, printed above the table: the workload,
// the server, the payload and the measurement's settings.
RunInfo DescribeRun(const RunOptions& run, const ClientOptions& options, const v1::ServerInfo& info,
                    const CallSettings& call_settings, const MeasureSettings& measure);

}  // namespace gpucompute::loadtest
