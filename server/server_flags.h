// The server's own flags (the device flags are in backend_flags.cc, the GPU
// gauges' in gpu_metrics_flags.cc, shared memory's in shared_memory_flags.cc):
// read and checked into options before anything slow starts, so that a
// mistake stops the server at once with a message naming the flag.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/kernels/problem.h"
#include "server/ceilings_file.h"
#include "server/engine/scheduler.h"
#include "server/grpc/auth.h"
#include "server/grpc/compute_service.h"
#include "server/grpc/credentials.h"
#include "server/grpc/transport.h"
#include "server/listeners.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

// Where the gRPC server listens, who may call it and how its connections
// are bounded.
struct ServingOptions {
  std::vector<Listener> listeners;
  std::optional<mode_t> socket_mode;  // of unix socket files; none: as created
  ServerSecurity security;
  std::optional<BearerTokenAuth> auth;
  ConnectionLimits connection_limits;
  int32_t max_concurrent_streams = 0;  // per connection; 0: gRPC's default
  // Threads, each with its completion queue, serving MatMul, Transpose and
  // Reduce (server/grpc/compute_queues.h); 0: gRPC's callback threads do.
  int32_t grpc_queues = 0;
};

// How requests wait for and run on the devices.
struct SchedulingOptions {
  int32_t max_queue_depth = 0;  // per device
  BatchingOptions batching;
  int32_t worker_spin_us = 0;  // CUDA backend only
  int32_t answer_threads = 0;
  int32_t inline_threads = 0;        // per device; 0: half its concurrency
  std::string autotune_cache;        // empty: choices kept in memory only
  bool calibrate_as_served = false;  // ComputeEngineOptions::calibrate_as_served
  // The batching the server runs with on `backend`: --max_batch_size=0 (the
  // default) is kCudaMaxBatchSize on the CUDA backend and 1 (off) on the
  // CPU backend, whose batches run their members one after another on one
  // thread and so only take cores from the rest.
  BatchingOptions BatchingOn(kernels::Backend backend) const;
};
inline constexpr int kCudaMaxBatchSize = 16;

// Tensors held between calls.
struct TensorFlagOptions {
  absl::Duration ttl;
  absl::Duration max_ttl;     // a request's ttl_seconds above it is refused
  int64_t memory_bytes = -1;  // -1: half of the devices' budgets
  std::string instance_name;  // empty: derived from --listen
};

struct ServerOptions {
  ServingOptions serving;
  SchedulingOptions scheduling;
  TensorFlagOptions tensors;
  ServiceConfig service;  // but its version, which the build sets
  // --ceilings: read before any device opens; applied once they have.
  std::string ceilings_path;
  std::optional<tools::v1::CeilingsFile> ceilings;
  int32_t idle_trim_seconds = 0;    // 0: never
  int32_t keep_cores_awake_us = 0;  // 0: off
  absl::Duration shutdown_grace;
};

// --log_level and --access_log, first of all, so that the rest logs as asked.
absl::Status SetUpLoggingFromFlags();

// The flags' options, reading the files they name (TLS, token, ceilings);
// the first mistake found, in the message the user sees.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags();

// The Prometheus endpoint of --metrics_listen; null when it is off, or when
// the default address is taken (several servers on one host).
absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetricsFromFlags(const Metrics& metrics);

}  // namespace gpucompute::server
