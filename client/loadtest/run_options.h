// What gpucompute-loadtest's flags ask for, read and checked before anything
// connects: the workload, the rows to run (concurrencies, rates, placements,
// connections, baselines), and the client, call and measurement settings.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpucompute/client.h"
#include "loadtest/load.h"

namespace gpucompute::loadtest {

// The reference rows --baseline asks for (report.h names their rows).
struct Baselines {
  bool tcp = false;             // the payload echoed over a socket
  bool grpc = false;            // the health Check
  bool service = false;         // ListTensors
  bool echo = false;            // the op's own bytes echoed by an in-process gRPC server
  int echo_queues = 0;          // the echo's completion queues; 0: callback threads
  bool echo_at_server = false;  // the echo is the server's Echo rpc, not in-process
};

struct RunOptions {
  std::string label;
  Workload workload;
  std::vector<double> rates;  // open loop, requests/s
  std::vector<int> levels;    // closed loop, requests in flight
  std::vector<int> connections;
  std::vector<std::string> placements;  // inline, tensor, shm; no repeats
  Baselines baselines;
  bool show_progress = false;

  bool transfer() const { return workload.transfer != Transfer::kNone; }
  bool HasPlacement(const std::string& placement) const;
};

// The flags' run, or INVALID_ARGUMENT naming the flag at fault. Not
// --merge_json, which measures nothing (report_files.h).
absl::StatusOr<RunOptions> RunOptionsFromFlags();

// The server, its TLS, token and transport; `connections` is left to the
// caller, which makes one client per --connections value.
ClientOptions ClientOptionsFromFlags();

// Each request's deadline and polling; `authorization` as `client` sends it.
CallSettings CallSettingsFromFlags(const Client& client);

MeasureSettings MeasureSettingsFromFlags();

// The rows' variants: upload or download for a stream; else --variants,
// where "all" is auto plus the server's variants of the op for the dtype and
// named variants are checked against the server's list.
absl::StatusOr<std::vector<std::string>> VariantsFromFlags(const v1::ServerInfo& info,
                                                           const Workload& w);

// The workload's matrices within what the server accepts (GetServerInfo):
// each that travels with a call within max_matrix_bytes, a streamed tensor
// within the tensor budget; the error names --shape and both numbers.
absl::Status CheckWorkloadFitsServer(const RunOptions& run, const v1::ServerInfo& info);

const char* TransferName(Transfer t);

}  // namespace gpucompute::loadtest
