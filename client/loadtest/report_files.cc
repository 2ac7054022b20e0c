// Report files from the flags, and --merge_json (report_files.h).
#include "loadtest/report_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loadtest/flags.h"

namespace gpucompute::loadtest {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckReportPaths() {
  for (const auto& [flag, path] :
       {std::pair{"csv", absl::GetFlag(FLAGS_csv)}, std::pair{"json", absl::GetFlag(FLAGS_json)},
        std::pair{"html", absl::GetFlag(FLAGS_html)}}) {
    if (path.empty()) continue;
    const size_t slash = path.rfind('/');
    const std::string folder =
        slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    const bool writable = access(path.c_str(), F_OK) == 0
                              ? access(path.c_str(), W_OK) == 0
                              : access(folder.c_str(), W_OK | X_OK) == 0;
    if (!writable) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": cannot write ", path, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteReports(const RunInfo& run, const std::vector<Row>& rows) {
  for (const auto& [flag, render] :
       std::vector<std::pair<std::string, std::function<absl::StatusOr<std::string>()>>>{
           {absl::GetFlag(FLAGS_csv), [&] { return ToCsv(rows); }},
           {absl::GetFlag(FLAGS_json), [&] { return ToJson(run, rows); }},
           {absl::GetFlag(FLAGS_html), [&] { return ToHtml(run, rows); }}}) {
    if (flag.empty()) continue;
    absl::StatusOr<std::string> contents = render();
    if (!contents.ok()) return contents.status();
    if (absl::Status st = WriteFile(flag, *contents); !st.ok()) return st;
    std::printf("wrote %s\n", flag.c_str());
  }
  return absl::OkStatus();
}

absl::Status MergeReports() {
  if (!absl::GetFlag(FLAGS_label).empty()) {
    return absl::InvalidArgumentError(
        "--label: tags the rows of a run; --merge_json keeps the labels the runs were given");
  }
  const std::vector<std::string> files =
      absl::StrSplit(absl::GetFlag(FLAGS_merge_json), ',', absl::SkipEmpty());
  std::vector<RunReport> runs;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    if (!in) return absl::NotFoundError(absl::StrCat("--merge_json: cannot read ", file));
    absl::StatusOr<RunReport> run = FromJson(contents.str());
    if (!run.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--merge_json: ", file, ": ", run.status().message()));
    }
    runs.push_back(std::move(*run));
  }
  absl::StatusOr<RunReport> merged = MergeRuns(files, std::move(runs));
  if (!merged.ok()) return merged.status();
  const RunInfo& run = merged->info;
  std::printf(
      "gpucompute-loadtest: %zu run%s merged: %s %s %s (%s%s) against %s (%s, %s backend)\n\n",
      files.size(), files.size() == 1 ? "" : "s", run.op.c_str(), run.shape.c_str(),
      run.dtype.c_str(), run.shape_meaning.c_str(),
      run.reduce.empty() ? "" : (", " + run.reduce).c_str(), run.server.c_str(),
      run.server_version.c_str(), run.backend.c_str());
  const int width = LabelWidth(merged->rows);
  std::printf("%s\n", FormatTableHeader(width).c_str());
  for (const Row& row : merged->rows) std::printf("%s\n", FormatTableRow(row, width).c_str());
  std::printf("%s\n", FormatWays(merged->rows, width).c_str());
  return WriteReports(run, merged->rows);
}

}  // namespace gpucompute::loadtest
