// The load test's run as JSON (--json), read back, and earlier runs merged (--merge_json).
#include <algorithm>
#include <filesystem>
#include <set>

#include <google/protobuf/util/json_util.h>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loadtest/report.h"

namespace gpucompute::loadtest {

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
    if (r.has_ways) {
      out->set_way_in_us(r.way_in_us);
      out->set_way_out_us(r.way_out_us);
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
    r.has_ways = in.has_way_in_us();
    r.way_in_us = in.way_in_us();
    r.way_out_us = in.way_out_us();
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
