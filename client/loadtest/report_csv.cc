// The load test's rows as CSV (--csv).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loadtest/report.h"
#include "loadtest/report_text.h"

namespace gpucompute::loadtest {

namespace {

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

}  // namespace

std::string ToCsv(const std::vector<Row>& rows) {
  std::string out =
      "variant,mode,concurrency,rate,payload_bytes,requests,seconds,requests_per_s,gbytes_per_s,"
      "avg_us,p50_us,p90_us,p95_us,p99_us,max_us,server_queue_us,server_upload_us,"
      "server_compute_us,server_download_us,server_total_us,client_other_us,vs_tcp,vs_grpc_echo,"
      "errors,dropped,"
      "windows,stable,placement,connections,batch,label,way_in_us,way_out_us\n";
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
                                             CsvField(r.label),
                                             r.has_ways ? Num(r.way_in_us) : "",
                                             r.has_ways ? Num(r.way_out_us) : ""};
    absl::StrAppend(&out, absl::StrJoin(fields, ","), "\n");
  }
  return out;
}

}  // namespace gpucompute::loadtest
