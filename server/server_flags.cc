// The server's own flags and their checks (server_flags.h).
#include "server/server_flags.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/common/flag_checks.h"
#include "server/ceilings_file.h"
#include "server/ops/log.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC addresses to listen on, comma-separated: host:port (port 0 picks a free port, "
          "printed at start-up), unix:PATH (a unix socket for clients on this host), "
          "unix-abstract:NAME (Linux abstract socket: no file, no permissions); e.g. "
          "0.0.0.0:50051,unix:/run/gpucompute/gpucompute.sock");
ABSL_FLAG(std::string, unix_socket_mode, "0660",
          "permissions (octal) given to each unix: socket of --listen once it is bound. They "
          "gate who can call the server through it: connecting needs write permission, so "
          "0660 admits the socket's owner and group, 0600 the owner only, 0666 every local "
          "user. Empty: leave the socket as created (the process umask decides)");
ABSL_FLAG(int64_t, max_matrix_bytes, int64_t{1} << 30,
          "largest single matrix (input or result) accepted, in bytes (1 or more)");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "requests waiting per device before new ones get RESOURCE_EXHAUSTED (1 to 1000000)");
ABSL_FLAG(int32_t, max_batch_size, 0,
          "small requests (1 MiB or less) of one op, dtype, shape and variant that wait together "
          "run as one batch of at most this many (one CUDA graph launch, the members side by "
          "side); 1 turns batching off. 0 (the default): 16 on the CUDA backend, off on the CPU "
          "backend (whose batches run their members one after another on one thread) (0 to 256)");
ABSL_FLAG(int32_t, batch_delay_us, 0,
          "how long the first request of a batch waits for company, in microseconds; 0 batches "
          "only requests already waiting and adds no delay (0 to 1000000)");
ABSL_FLAG(int32_t, worker_spin_us, 1000,
          "CUDA backend: how long a worker polls for the next request before it sleeps, in "
          "microseconds, once its GPU has run one request at a time for as long (one worker per "
          "GPU at a time, so at most one busy core per GPU): a lone caller's next request starts "
          "without a sleeping thread's wake-up (on an H200 host, 28-48 us of queue time at one "
          "request in flight); under load nobody polls and small requests run on the gRPC "
          "thread that received them; 0 turns polling off (0 to 10000)");
ABSL_FLAG(int32_t, answer_threads, 4,
          "threads that send the answers of finished requests for device workers that have more "
          "requests waiting, so that a worker goes on with the next one meanwhile; a worker with "
          "nothing waiting answers its own (no hand-off at low load), and a gRPC thread running "
          "small requests always does. 0: workers always answer their own (0 to 64)");
ABSL_FLAG(int32_t, inline_threads, 0,
          "with batching on: gRPC threads that may run small requests (1 MiB or less) on one "
          "device at once while another request that may batch arrives; past it that request "
          "queues and its thread goes back to gRPC, and a thread running small requests takes "
          "what queued, as one batch, when its own ends (while those takes find batch mates; "
          "where they find one request at a time, as at 8 in flight over 8 connections, the "
          "device stops holding requests back for 20 ms at a time). Requests that never batch "
          "(shared memory, or tensors and the call's own bytes mixed in one request) run on "
          "their gRPC thread while the device has a stream free. 0: half of what the device runs "
          "at once (--streams_per_device), so that half of gRPC's threads hand such requests to "
          "the other half (0 to 1024)");
ABSL_FLAG(std::string, ceilings, "",
          "JSON file of device ceilings (gpucompute-bench --ceilings_out writes one) used for "
          "roofline fractions in place of the start-up measurement; a figure it leaves out "
          "keeps the measured one (the CPU backend measures only what the file leaves out: "
          "its measurement takes every core for about a second)");
ABSL_FLAG(int32_t, profile_warmup, 2, "Profile: warm-up runs when the request says 0 (0 to 1000)");
ABSL_FLAG(int32_t, profile_repetitions, 10,
          "Profile: timed runs when the request says 0 (1 to 1000)");
ABSL_FLAG(bool, calibrate_as_served, false,
          "auto: the first small request (64 KiB or less) of a shape bucket whose matrices all "
          "travel in the call times the candidates the way it is served (CUDA: zero-copy kernels "
          "reading and writing pinned host memory, other variants with their copies up and "
          "down, by the host's clock) instead of kernels alone on device memory; such requests "
          "keep choices of their own, apart from those of requests on tensors (which Profile "
          "also sets); the choice and its times are logged");
ABSL_FLAG(std::string, autotune_cache, "",
          "file where \"auto\" keeps its measured choices across restarts (empty: memory only)");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 30,
          "on SIGINT/SIGTERM, how long the calls in flight may take, their answers included "
          "reaching their clients, before they are cancelled (new calls are refused at once); "
          "the exit status is 0 when none had to be, else 1 (0 to 86400)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:8002",
          "HTTP address of the Prometheus endpoint /metrics; empty: off. Another address must "
          "bind or the server exits; the default is best effort (several servers on one host, "
          "as in tests, would collide on it): if taken, the server logs it and runs without");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the server; with --tls_key turns on TLS (empty: plaintext)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (unencrypted)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificates; when set, clients must present a certificate they signed "
          "(mutual TLS)");
ABSL_FLAG(std::string, auth_token_file, "",
          "file whose first line is a bearer token; when set, Compute calls without "
          "\"authorization: Bearer <token>\" get UNAUTHENTICATED (health and reflection stay "
          "open). Use with TLS: the token is otherwise sent in clear text");
ABSL_FLAG(int64_t, grpc_memory_quota_bytes, int64_t{4} << 30,
          "memory gRPC may use for all connections' buffers (grpc::ResourceQuota), at least "
          "1048576 (below it gRPC cannot read a call's frames); 0: unbounded");
ABSL_FLAG(int32_t, max_connection_idle_seconds, 300,
          "close a client connection that had no call in flight for this long; 0: never "
          "(0 or more)");
ABSL_FLAG(int32_t, max_connection_age_seconds, 0,
          "ask a client to reconnect once its connection is this old (calls in flight finish "
          "first); 0: never (0 or more)");
ABSL_FLAG(int64_t, response_buffer_pool_bytes, int64_t{2} << 30,
          "host memory kept for reuse by large response payloads while the server is busy "
          "(0 or more)");
ABSL_FLAG(int32_t, idle_trim_seconds, 10,
          "after this long without calls, free the kept response buffers and return free heap "
          "memory to the system; 0: never (0 to 86400)");
ABSL_FLAG(int32_t, keep_cores_awake_us, 0,
          "keep every core the server may run on from going idle while calls are in flight and "
          "for this many microseconds after the last one, with a spinner of the lowest "
          "scheduling class (SCHED_IDLE) per core that any other thread takes the core from; "
          "the spinners rest while more calls than a quarter of the cores are in flight. On a "
          "virtual machine, where an idle core halts and takes 100 us or more to wake, calls "
          "at low concurrency answer sooner, at the price of every core busy meanwhile; 0 (the "
          "default): off (0 to 1000000)");
ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written to stderr: info, warning (adds every failed request) "
          "or error");
ABSL_FLAG(std::string, access_log, "",
          "one line per call (peer, method, status, variant, total microseconds) appended to "
          "this file; \"-\" for stderr; empty: off");
ABSL_FLAG(std::string, tensor_ttl, "10m",
          "default idle lifetime of a tensor (Upload, or an output kept): a duration such as "
          "\"10m\" or \"90s\", or plain seconds; every use renews it; at most --max_tensor_ttl");
ABSL_FLAG(std::string, max_tensor_ttl, "24h",
          "longest idle lifetime a client may ask of a tensor (ttl_seconds of Upload or of a "
          "kept output); a longer one is refused with INVALID_ARGUMENT, so that a forgotten "
          "tensor cannot hold device memory for good: a duration or plain seconds");
ABSL_FLAG(int64_t, tensor_memory_bytes, -1,
          "most bytes of tensors held at once, over all devices; they come out of the same "
          "device memory budget as requests (-1: half of the devices' budgets; 0: no tensors)");
ABSL_FLAG(std::string, instance_name, "",
          "this instance's name in tensor ids and TensorInfo.server, so that a replica given "
          "another's id can say who holds it (empty: host:port of the first TCP address of "
          "--listen, with the host name for 0.0.0.0; with only unix sockets, the host name and "
          "the first socket's path, host:/path)");
ABSL_FLAG(int32_t, grpc_queues, 0,
          "threads that serve MatMul, Transpose and Reduce, each from its own gRPC completion "
          "queue; 0: gRPC's callback threads serve them, as they serve every other call (gRPC "
          "runs those threads, half the cores, on one queue they share)");
ABSL_FLAG(int32_t, max_concurrent_streams, 128,
          "requests one client connection may have in flight at once; more wait in the client "
          "(HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; 0: gRPC's default, unlimited)");

namespace gpucompute::server {
namespace {

using common::CheckFlagAtLeast;
using common::CheckFlagRange;

constexpr char kDefaultMetricsListen[] = "0.0.0.0:8002";
// Bounds of the batching flags: the metric's largest bucket, and a second.
constexpr int32_t kMaxBatchSizeFlag = 256;
constexpr int32_t kMaxBatchDelayUs = 1000000;
// A worker polls at most this long (10 ms) after a request: beyond it, sleeping costs less.
constexpr int32_t kMaxWorkerSpinUs = 10000;
constexpr int32_t kMaxKeepCoresAwakeUs = 1000000;
constexpr int32_t kMaxAnswerThreads = 64;
constexpr int32_t kMaxInlineThreads = 1024;
constexpr int32_t kMaxGrpcQueues = 256;
constexpr int32_t kMaxQueueDepth = 1000000;
// Profile's defaults stay within what a request may ask for (validate.h).
constexpr int32_t kMaxProfileRuns = 1000;
constexpr int32_t kMaxSecondsFlag = 86400;  // a day
// gRPC's resource quota below which a call's frames no longer fit: a
// request then ends UNAVAILABLE (GOAWAY), not RESOURCE_EXHAUSTED.
constexpr int64_t kMinGrpcMemoryQuota = int64_t{1} << 20;

// --tensor_ttl and --max_tensor_ttl: an absl duration ("10m", "90s") or plain
// seconds, positive and finite.
absl::StatusOr<absl::Duration> ParseTtlFlag(const std::string& flag, const std::string& text) {
  absl::Duration ttl;
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds)) {
    ttl = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &ttl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": \"", text, "\" is neither a duration (\"10m\", \"90s\") nor seconds"));
  }
  if (ttl <= absl::ZeroDuration() || ttl == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": must be positive and finite, got ", text));
  }
  return ttl;
}

// The connections' flags: their bounds, then the options they give.
absl::Status ReadConnectionLimits(ConnectionLimits& limits) {
  const int64_t quota = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  if (quota != 0 && quota < kMinGrpcMemoryQuota) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_memory_quota_bytes: must be 0 (unbounded) or at least ",
                     kMinGrpcMemoryQuota, ", got ", quota));
  }
  const int32_t idle = absl::GetFlag(FLAGS_max_connection_idle_seconds);
  const int32_t age = absl::GetFlag(FLAGS_max_connection_age_seconds);
  for (auto [flag, value] : {std::pair{"max_connection_idle_seconds", idle},
                             std::pair{"max_connection_age_seconds", age}}) {
    if (absl::Status s = CheckFlagAtLeast(flag, value, 0); !s.ok()) return s;
  }
  limits.memory_quota_bytes = quota;
  limits.max_idle_ms = int64_t{1000} * idle;
  limits.max_age_ms = int64_t{1000} * age;
  return absl::OkStatus();
}

// TLS, the bearer token, and the connections' bounds.
absl::Status ReadServingFlags(ServingOptions& serving) {
  auto security = MakeServerSecurity({absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                      absl::GetFlag(FLAGS_tls_client_ca)});
  if (!security.ok()) return security.status();
  serving.security = std::move(*security);
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    auto loaded = BearerTokenAuth::FromFile(path);
    if (!loaded.ok()) return loaded.status();
    serving.auth = std::move(*loaded);
    if (absl::GetFlag(FLAGS_tls_cert).empty()) {
      LogError("warning: --auth_token_file without TLS: tokens cross the network in clear text");
    }
  }
  return ReadConnectionLimits(serving.connection_limits);
}

}  // namespace

absl::Status SetUpLoggingFromFlags() {
  if (absl::Status s = SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) return s;
  return OpenAccessLog(absl::GetFlag(FLAGS_access_log));
}

// The checks run in the order they always have, so that of several mistakes
// the same one is reported.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  ServerOptions options;
  if (absl::Status s = ReadServingFlags(options.serving); !s.ok()) return s;

  TensorFlagOptions& tensors = options.tensors;
  auto tensor_ttl = ParseTtlFlag("tensor_ttl", absl::GetFlag(FLAGS_tensor_ttl));
  if (!tensor_ttl.ok()) return tensor_ttl.status();
  tensors.ttl = *tensor_ttl;
  auto max_ttl = ParseTtlFlag("max_tensor_ttl", absl::GetFlag(FLAGS_max_tensor_ttl));
  if (!max_ttl.ok()) return max_ttl.status();
  tensors.max_ttl = *max_ttl;
  if (tensors.ttl > tensors.max_ttl) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor_ttl: ", absl::FormatDuration(tensors.ttl),
                     " is longer than --max_tensor_ttl ", absl::FormatDuration(tensors.max_ttl)));
  }
  tensors.memory_bytes = absl::GetFlag(FLAGS_tensor_memory_bytes);
  if (tensors.memory_bytes < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor_memory_bytes: must be >= 0, or -1 for half the device "
                     "budget; got ",
                     tensors.memory_bytes));
  }
  tensors.instance_name = absl::GetFlag(FLAGS_instance_name);

  SchedulingOptions& scheduling = options.scheduling;
  scheduling.max_queue_depth = absl::GetFlag(FLAGS_max_queue_depth);
  if (absl::Status s =
          CheckFlagRange("max_queue_depth", scheduling.max_queue_depth, 1, kMaxQueueDepth);
      !s.ok()) {
    return s;
  }
  const int32_t max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  if (absl::Status s = CheckFlagRange("max_batch_size", max_batch_size, 0, kMaxBatchSizeFlag);
      !s.ok()) {
    return s;
  }
  scheduling.batching.max_batch_size = max_batch_size;
  const int32_t batch_delay_us = absl::GetFlag(FLAGS_batch_delay_us);
  if (absl::Status s = CheckFlagRange("batch_delay_us", batch_delay_us, 0, kMaxBatchDelayUs);
      !s.ok()) {
    return s;
  }
  scheduling.batching.delay = absl::Microseconds(batch_delay_us);
  scheduling.worker_spin_us = absl::GetFlag(FLAGS_worker_spin_us);
  if (absl::Status s =
          CheckFlagRange("worker_spin_us", scheduling.worker_spin_us, 0, kMaxWorkerSpinUs);
      !s.ok()) {
    return s;
  }
  scheduling.answer_threads = absl::GetFlag(FLAGS_answer_threads);
  if (absl::Status s =
          CheckFlagRange("answer_threads", scheduling.answer_threads, 0, kMaxAnswerThreads);
      !s.ok()) {
    return s;
  }
  scheduling.inline_threads = absl::GetFlag(FLAGS_inline_threads);
  if (absl::Status s =
          CheckFlagRange("inline_threads", scheduling.inline_threads, 0, kMaxInlineThreads);
      !s.ok()) {
    return s;
  }
  scheduling.autotune_cache = absl::GetFlag(FLAGS_autotune_cache);
  scheduling.calibrate_as_served = absl::GetFlag(FLAGS_calibrate_as_served);

  // Read before any device opens: a bad file stops start-up at once.
  options.ceilings_path = absl::GetFlag(FLAGS_ceilings);
  if (!options.ceilings_path.empty()) {
    auto file = ReadCeilingsFile(options.ceilings_path);
    if (!file.ok()) return file.status();
    options.ceilings = std::move(*file);
  }

  ServingOptions& serving = options.serving;
  serving.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (serving.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--max_concurrent_streams: must be >= 0, got ",
                                                   serving.max_concurrent_streams));
  }
  serving.grpc_queues = absl::GetFlag(FLAGS_grpc_queues);
  if (absl::Status s = CheckFlagRange("grpc_queues", serving.grpc_queues, 0, kMaxGrpcQueues);
      !s.ok()) {
    return s;
  }
  auto listeners = ParseListenList(absl::GetFlag(FLAGS_listen));
  if (!listeners.ok()) return listeners.status();
  serving.listeners = std::move(*listeners);
  auto socket_mode = ParseSocketMode(absl::GetFlag(FLAGS_unix_socket_mode));
  if (!socket_mode.ok()) return socket_mode.status();
  serving.socket_mode = *socket_mode;

  ServiceConfig& service = options.service;
  service.compute_calls_on_queues = serving.grpc_queues > 0;
  service.host_buffer_pool_bytes = absl::GetFlag(FLAGS_response_buffer_pool_bytes);
  service.limits.max_matrix_bytes = absl::GetFlag(FLAGS_max_matrix_bytes);
  service.profile_warmup = absl::GetFlag(FLAGS_profile_warmup);
  service.profile_repetitions = absl::GetFlag(FLAGS_profile_repetitions);
  options.idle_trim_seconds = absl::GetFlag(FLAGS_idle_trim_seconds);
  options.keep_cores_awake_us = absl::GetFlag(FLAGS_keep_cores_awake_us);
  const int32_t grace_seconds = absl::GetFlag(FLAGS_shutdown_grace_seconds);
  for (const absl::Status& s : {
           CheckFlagAtLeast("response_buffer_pool_bytes", service.host_buffer_pool_bytes, 0),
           CheckFlagAtLeast("max_matrix_bytes", service.limits.max_matrix_bytes, 1),
           CheckFlagRange("profile_warmup", service.profile_warmup, 0, kMaxProfileRuns),
           CheckFlagRange("profile_repetitions", service.profile_repetitions, 1, kMaxProfileRuns),
           CheckFlagRange("idle_trim_seconds", options.idle_trim_seconds, 0, kMaxSecondsFlag),
           CheckFlagRange("keep_cores_awake_us", options.keep_cores_awake_us, 0,
                          kMaxKeepCoresAwakeUs),
           CheckFlagRange("shutdown_grace_seconds", grace_seconds, 0, kMaxSecondsFlag),
       }) {
    if (!s.ok()) return s;
  }
  options.shutdown_grace = absl::Seconds(grace_seconds);
  return options;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetricsFromFlags(const Metrics& metrics) {
  const std::string address = absl::GetFlag(FLAGS_metrics_listen);
  if (address.empty()) {
    LogInfo("metrics: off (--metrics_listen is empty)");
    return nullptr;
  }
  auto endpoint = MetricsEndpoint::Start(address, metrics);
  if (!endpoint.ok()) {
    if (address != kDefaultMetricsListen) return endpoint.status();
    LogError(absl::StrCat(endpoint.status().message(), "; serving without metrics"));
    return nullptr;
  }
  LogInfo(absl::StrCat("metrics: http://", (*endpoint)->address(), "/metrics"));
  return endpoint;
}

BatchingOptions SchedulingOptions::BatchingOn(kernels::Backend backend) const {
  BatchingOptions on = batching;
  if (on.max_batch_size == 0) {
    on.max_batch_size = backend == kernels::Backend::kCuda ? kCudaMaxBatchSize : 1;
  }
  return on;
}

}  // namespace gpucompute::server
