// The report files gpucompute-loadtest writes (--csv, --json, --html), and
// --merge_json, which renders earlier runs' --json files together instead of
// measuring.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "loadtest/report.h"

namespace gpucompute::loadtest {

// Whether each of --csv, --json and --html that is given can be written
// (its folder exists and takes files, or the file exists and is writable),
// checked before a run measures anything; the error names the flag.
absl::Status CheckReportPaths();

// Writes each of --csv, --json and --html that is given, printing its name.
absl::Status WriteReports(const RunInfo& run, const std::vector<Row>& rows);

// --merge_json: prints the runs' rows as one table and writes the report
// files from them.
absl::Status MergeReports();

}  // namespace gpucompute::loadtest
