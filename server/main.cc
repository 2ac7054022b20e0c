// gpucompute-server: serves MatMul, Transpose, Reduce, Profile and
// GetServerInfo over gRPC on the GPUs (or the CPU when none is usable).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/cpu/cpu_device.h"
#include "server/cuda/open_devices.h"
#include "server/engine/compute_engine.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/tensor_transfers.h"
#include "server/engine/variant_selector.h"
#include "server/grpc/auth.h"
#include "server/grpc/compute_service.h"
#include "server/grpc/credentials.h"
#include "server/grpc/transport.h"
#include "server/ops/flags_usage.h"
#include "server/ops/host_memory.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC address to listen on; port 0 picks a free port (printed at start-up)");
ABSL_FLAG(std::string, backend, "auto", "auto (CUDA when a GPU is usable, else CPU), cuda, or cpu");
ABSL_FLAG(int64_t, max_matrix_bytes, int64_t{1} << 30,
          "largest single matrix (input or result) accepted, in bytes");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "requests waiting per device before new ones get RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, cpu_workers, 0, "CPU backend: requests run at once (0: one per core)");
ABSL_FLAG(std::string, devices, "all", "CUDA backend: GPUs to use, \"all\" or a list like 0,1");
ABSL_FLAG(int32_t, streams_per_device, 4, "CUDA backend: requests each GPU runs at once");
ABSL_FLAG(double, device_memory_fraction, 0.9,
          "CUDA backend: cap of pooled device memory, as a fraction of each GPU's memory");
ABSL_FLAG(int32_t, profile_warmup, 2, "Profile: warm-up runs when the request says 0");
ABSL_FLAG(int32_t, profile_repetitions, 10, "Profile: timed runs when the request says 0");
ABSL_FLAG(std::string, autotune_cache, "",
          "file where \"auto\" keeps its measured choices across restarts (empty: memory only)");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 30,
          "on SIGINT/SIGTERM, how long in-flight requests may take before they are cancelled");
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
          "memory gRPC may use for all connections' buffers (grpc::ResourceQuota); 0: unbounded");
ABSL_FLAG(int32_t, max_connection_idle_seconds, 300,
          "close a client connection that had no call in flight for this long; 0: never");
ABSL_FLAG(int32_t, max_connection_age_seconds, 0,
          "ask a client to reconnect once its connection is this old (calls in flight finish "
          "first); 0: never");
ABSL_FLAG(int64_t, response_buffer_pool_bytes, int64_t{2} << 30,
          "host memory kept for reuse by large response payloads while the server is busy");
ABSL_FLAG(int32_t, idle_trim_seconds, 10,
          "after this long without calls, free the kept response buffers and return free heap "
          "memory to the system; 0: never");
ABSL_FLAG(std::string, log_level, "info",
          "least severe log lines written to stderr: info, warning (adds every failed request) "
          "or error");
ABSL_FLAG(std::string, access_log, "",
          "one line per call (peer, method, status, variant, total microseconds) appended to "
          "this file; \"-\" for stderr; empty: off");
ABSL_FLAG(std::string, tensor_ttl, "10m",
          "default idle lifetime of a tensor (Upload, or an output kept): a duration such as "
          "\"10m\" or \"90s\", or plain seconds; every use renews it");
ABSL_FLAG(int64_t, tensor_memory_bytes, -1,
          "most bytes of tensors held at once, over all devices; they come out of the same "
          "device memory budget as requests (-1: half of the devices' budgets; 0: no tensors)");
ABSL_FLAG(std::string, instance_name, "",
          "this instance's name in tensor ids and TensorInfo.server, so that a replica given "
          "another's id can say who holds it (empty: host:port of --listen, with the host "
          "name for 0.0.0.0)");
ABSL_FLAG(int32_t, max_concurrent_streams, 128,
          "requests one client connection may have in flight at once; more wait in the client "
          "(HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS; 0: gRPC's default, unlimited)");

namespace gpucompute::server {
namespace {

constexpr char kServiceName[] = "gpucompute.v1.Compute";
constexpr char kDefaultMetricsListen[] = "0.0.0.0:8002";
// Threads moving tensor bytes to and from the devices: enough for a few
// uploads and downloads at once (each waits on its copies).
constexpr int kTensorTransferThreads = 8;

struct Backend {
  kernels::Backend kind = kernels::Backend::kCpu;
  std::vector<std::unique_ptr<Device>> devices;
};

absl::StatusOr<Backend> OpenBackend(const std::string& choice) {
  if (choice != "auto" && choice != "cuda" && choice != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: must be auto, cuda or cpu, got \"", choice, "\""));
  }
  Backend backend;
  if (choice != "cpu") {
    CudaDeviceOptions options;
    options.devices = absl::GetFlag(FLAGS_devices);
    options.streams_per_device = absl::GetFlag(FLAGS_streams_per_device);
    options.device_memory_fraction = absl::GetFlag(FLAGS_device_memory_fraction);
    auto gpus = OpenCudaDevices(options);
    if (gpus.ok()) {
      backend.kind = kernels::Backend::kCuda;
      backend.devices = std::move(*gpus);
      LogInfo(absl::StrCat("backend cuda: ", backend.devices.size(), " GPU(s)"));
      return backend;
    }
    if (choice == "cuda") return gpus.status();
    LogInfo(absl::StrCat("backend cpu: ", gpus.status().message()));
  } else {
    LogInfo("backend cpu: chosen by --backend=cpu");
  }
  backend.devices.push_back(MakeCpuDevice(absl::GetFlag(FLAGS_cpu_workers)));
  return backend;
}

// "0.0.0.0:0" with port 12345 chosen -> "0.0.0.0:12345".
std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

// A request carries at most two matrices (MatMul's a and b) plus a little
// framing; refusing larger messages in the transport stops a client from
// making the server buffer gigabytes it would reject anyway.
int MaxReceiveMessageBytes(int64_t max_matrix_bytes) {
  const int64_t limit = 2 * max_matrix_bytes + (int64_t{1} << 20);
  return static_cast<int>(std::min<int64_t>(limit, std::numeric_limits<int>::max()));
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetrics(const Metrics& metrics) {
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

// --tensor_ttl: an absl duration ("10m", "90s") or plain seconds.
absl::StatusOr<absl::Duration> ParseTensorTtl(const std::string& text) {
  absl::Duration ttl;
  int64_t seconds = 0;
  if (absl::SimpleAtoi(text, &seconds)) {
    ttl = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &ttl)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tensor_ttl: \"", text, "\" is neither a duration (\"10m\", \"90s\") nor seconds"));
  }
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor_ttl: must be positive, got ", text));
  }
  return ttl;
}

// host:port of the listen address with the port bound; a wildcard host
// (0.0.0.0, [::], none) becomes the machine's name, which peers can reach.
std::string DefaultInstanceName(const std::string& listen, int port) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {};
    host = gethostname(name, sizeof name - 1) == 0 && name[0] != 0 ? name : "localhost";
  }
  return absl::StrCat(host, ":", port);
}

// True when SIGINT or SIGTERM arrived while the server was starting.
bool StopSignalPending() {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM);
}

int Run() {
  // A broken ladder table (a duplicate or launcher-less variant) stops start-up.
  if (auto registry = kernels::LoadDefaultRegistry(); !registry.ok()) {
    LogError(absl::StrCat("variant registry: ", registry.status().message()));
    return 1;
  }
  if (auto s = SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    LogError(std::string(s.message()));
    return 1;
  }
  if (auto s = OpenAccessLog(absl::GetFlag(FLAGS_access_log)); !s.ok()) {
    LogError(std::string(s.message()));
    return 1;
  }
  KeepLargeAllocationsInHeap();
  // Signals are taken synchronously by this thread; block them before any
  // other thread starts so none of those receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  // Configuration mistakes stop the server before anything slow starts.
  auto security = MakeServerSecurity({absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
                                      absl::GetFlag(FLAGS_tls_client_ca)});
  if (!security.ok()) {
    LogError(std::string(security.status().message()));
    return 1;
  }
  std::optional<BearerTokenAuth> auth;
  if (const std::string path = absl::GetFlag(FLAGS_auth_token_file); !path.empty()) {
    auto loaded = BearerTokenAuth::FromFile(path);
    if (!loaded.ok()) {
      LogError(std::string(loaded.status().message()));
      return 1;
    }
    auth = std::move(*loaded);
    if (absl::GetFlag(FLAGS_tls_cert).empty()) {
      LogError("warning: --auth_token_file without TLS: tokens cross the network in clear text");
    }
  }
  auto tensor_ttl = ParseTensorTtl(absl::GetFlag(FLAGS_tensor_ttl));
  if (!tensor_ttl.ok()) {
    LogError(std::string(tensor_ttl.status().message()));
    return 1;
  }
  if (absl::GetFlag(FLAGS_tensor_memory_bytes) < -1) {
    LogError(
        absl::StrCat("--tensor_memory_bytes: must be >= 0, or -1 for half the device "
                     "budget; got ",
                     absl::GetFlag(FLAGS_tensor_memory_bytes)));
    return 1;
  }
  const int32_t max_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (max_streams < 0) {
    LogError(absl::StrCat("--max_concurrent_streams: must be >= 0, got ", max_streams));
    return 1;
  }

  Metrics metrics;
  auto metrics_endpoint = StartMetrics(metrics);
  if (!metrics_endpoint.ok()) {
    LogError(std::string(metrics_endpoint.status().message()));
    return 1;
  }

  ServiceConfig config;
  config.host_buffer_pool_bytes = absl::GetFlag(FLAGS_response_buffer_pool_bytes);
  config.limits.max_matrix_bytes = absl::GetFlag(FLAGS_max_matrix_bytes);
  config.version = GPUCOMPUTE_VERSION;
  config.profile_warmup = absl::GetFlag(FLAGS_profile_warmup);
  config.profile_repetitions = absl::GetFlag(FLAGS_profile_repetitions);
  ComputeService service(kernels::DefaultRegistry(), config, metrics, auth ? &*auth : nullptr);

  // The port opens before the devices do, answering health checks with
  // NOT_SERVING (and Compute calls with UNAVAILABLE) until they are ready.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  builder.AddListeningPort(listen, security->credentials, &port);
  // A second server on the same port must fail to start, not share it.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ConnectionLimits connection_limits;
  connection_limits.memory_quota_bytes = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  connection_limits.max_idle_ms = int64_t{1000} * absl::GetFlag(FLAGS_max_connection_idle_seconds);
  connection_limits.max_age_ms = int64_t{1000} * absl::GetFlag(FLAGS_max_connection_age_seconds);
  ApplyTransportOptions(builder, connection_limits);
  builder.SetMaxReceiveMessageSize(MaxReceiveMessageBytes(config.limits.max_matrix_bytes));
  if (max_streams > 0) builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, max_streams);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LogError(absl::StrCat("cannot listen on ", listen));
    return 1;
  }
  // The default health service starts out SERVING for ""; correct it at once.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  LogInfo(absl::StrCat("gRPC on ", WithPort(listen, port), " (", security->description,
                       auth ? ", bearer token" : "", "): NOT_SERVING while devices open"));

  auto backend = OpenBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) {
    LogError(std::string(backend.status().message()));
    server->Shutdown();
    return 1;
  }
  for (const auto& d : backend->devices) {
    LogInfo(absl::StrCat("device ", d->description().name, ": ceilings ",
                         static_cast<int64_t>(d->ceilings().gbytes_per_s), " GB/s, ",
                         static_cast<int64_t>(d->ceilings().gflops), " GFLOP/s"));
  }
  const kernels::Backend kind = backend->kind;
  Scheduler scheduler(std::move(backend->devices), absl::GetFlag(FLAGS_max_queue_depth));
  VariantSelector selector(kernels::DefaultRegistry(), kind);
  if (const std::string cache = absl::GetFlag(FLAGS_autotune_cache); !cache.empty()) {
    if (auto s = selector.UseCacheFile(cache); !s.ok()) {
      LogError(absl::StrCat("--autotune_cache: ", s.message()));
      server->Shutdown();
      scheduler.Shutdown();
      return 1;
    }
    LogInfo(absl::StrCat("autotune cache: ", cache));
  }
  // Tensors: declared after the scheduler, so they are freed while their
  // devices are still open.
  TensorStoreOptions tensor_options;
  tensor_options.limit_bytes = absl::GetFlag(FLAGS_tensor_memory_bytes);
  if (tensor_options.limit_bytes < 0) {
    int64_t budget = 0;
    for (const auto& d : scheduler.devices()) budget += d->memory_budget_bytes();
    tensor_options.limit_bytes = budget / 2;
  }
  tensor_options.default_ttl = *tensor_ttl;
  tensor_options.instance = absl::GetFlag(FLAGS_instance_name);
  if (tensor_options.instance.empty()) tensor_options.instance = DefaultInstanceName(listen, port);
  TensorStore tensors(tensor_options);
  TensorTransfers transfers(tensors, scheduler.devices(), kTensorTransferThreads);
  LogInfo(absl::StrCat("tensors: up to ", tensor_options.limit_bytes, " bytes, idle lifetime ",
                       absl::FormatDuration(tensor_options.default_ttl), ", instance ",
                       tensor_options.instance));
  ComputeEngine engine(kernels::DefaultRegistry(), scheduler, selector, kind, &tensors);
  service.Activate(engine, &transfers);
  metrics.AttachScheduler(&scheduler);
  metrics.AttachTensorStore(&tensors);

  // Start-up's probes (ceilings, calibration buffers) are freed by now; the
  // heap keeps them unless told to give them back.
  ReturnFreeHeapToSystem();
  std::optional<IdleMemoryTrimmer> trimmer;
  if (const int32_t idle = absl::GetFlag(FLAGS_idle_trim_seconds); idle > 0) {
    trimmer.emplace(
        absl::Seconds(idle),
        [&service] {
          return IdleMemoryTrimmer::Activity{service.calls_started(), service.calls_in_flight()};
        },
        [&service] {
          const int64_t freed = service.ReleaseRetainedBuffers();
          LogInfo(absl::StrCat("idle: freed ", freed >> 20,
                               " MiB of kept response buffers; returning free heap memory"));
        });
  }

  // A stop requested during start-up drains at once, never showing SERVING.
  if (!StopSignalPending()) {
    health->SetServingStatus(kServiceName, true);
    health->SetServingStatus(true);
    std::fprintf(stdout, "gpucompute-server listening on %s\n", WithPort(listen, port).c_str());
    std::fflush(stdout);
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo(absl::StrCat("received ", strsignal(signal_number), ": draining"));
  health->SetServingStatus(false);
  const auto grace = std::chrono::system_clock::now() +
                     std::chrono::seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  server->Shutdown(grace);  // stops accepting; waits for in-flight calls
  scheduler.Shutdown();
  server->Wait();
  metrics.AttachScheduler(nullptr);  // the scheduler goes before the endpoint
  metrics.AttachTensorStore(nullptr);
  LogInfo("stopped: every admitted call was answered");
  // Every call has been answered. gRPC's own teardown (grpc_shutdown, run as
  // the last gRPC object goes) can then wait up to ~10 s on an internal
  // timer; the exit does not wait for it.
  std::thread([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fflush(nullptr);
    std::_Exit(0);
  }).detach();
  return 0;
}

}  // namespace
}  // namespace gpucompute::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpucompute-server: GPU MatMul, Transpose and Reduce over gRPC.\n"
      "  gpucompute-server --listen=0.0.0.0:50051 --backend=auto");
  gpucompute::server::HandleHelpAndVersion(argc, argv, "gpucompute-server");
  absl::ParseCommandLine(argc, argv);
  return gpucompute::server::Run();
}
