// gpucompute-loadtest's command-line flags, defined in flags.cc; read by the
// files that turn them into the run's settings (run_options.cc) and its
// report files (report_files.cc).
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/time/time.h"

ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(std::string, op);
ABSL_DECLARE_FLAG(std::string, placement);
ABSL_DECLARE_FLAG(std::string, shape);
ABSL_DECLARE_FLAG(std::string, dtype);
ABSL_DECLARE_FLAG(std::string, axis);
ABSL_DECLARE_FLAG(std::string, reduce_op);
ABSL_DECLARE_FLAG(std::string, variants);
ABSL_DECLARE_FLAG(bool, allow_tf32);
ABSL_DECLARE_FLAG(std::string, concurrency);
ABSL_DECLARE_FLAG(std::string, rate);
ABSL_DECLARE_FLAG(int32_t, max_outstanding);
ABSL_DECLARE_FLAG(absl::Duration, warmup);
ABSL_DECLARE_FLAG(absl::Duration, window);
ABSL_DECLARE_FLAG(int32_t, min_requests);
ABSL_DECLARE_FLAG(int32_t, stable_windows);
ABSL_DECLARE_FLAG(double, stability);
ABSL_DECLARE_FLAG(absl::Duration, max_time);
ABSL_DECLARE_FLAG(absl::Duration, deadline);
ABSL_DECLARE_FLAG(std::string, baseline);
ABSL_DECLARE_FLAG(std::string, echo_at);
ABSL_DECLARE_FLAG(int32_t, echo_grpc_queues);
ABSL_DECLARE_FLAG(std::string, label);
ABSL_DECLARE_FLAG(std::string, merge_json);
ABSL_DECLARE_FLAG(std::string, csv);
ABSL_DECLARE_FLAG(std::string, json);
ABSL_DECLARE_FLAG(std::string, html);
ABSL_DECLARE_FLAG(std::string, progress);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(bool, tls);
ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(bool, grpc_defaults);
ABSL_DECLARE_FLAG(bool, busy_poll);
ABSL_DECLARE_FLAG(int32_t, load_threads);
ABSL_DECLARE_FLAG(std::string, lb);
ABSL_DECLARE_FLAG(std::string, connections);
