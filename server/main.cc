// gpucompute-server: serves MatMul, Transpose, Reduce, Profile and
// GetServerInfo over gRPC on the GPUs (or the CPU when none is usable).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/ceilings_file.h"
#include "server/cpu/cpu_device.h"
#include "server/cuda/open_devices.h"
#include "server/engine/compute_engine.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/tensor_transfers.h"
#include "server/engine/variant_selector.h"
#include "server/gpu_metrics_flags.h"
#include "server/grpc/auth.h"
#include "server/grpc/compute_service.h"
#include "server/grpc/credentials.h"
#include "server/grpc/transport.h"
#include "server/ops/flags_usage.h"
#include "server/ops/host_memory.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/shared_memory_flags.h"

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
ABSL_FLAG(std::string, backend, "auto", "auto (CUDA when a GPU is usable, else CPU), cuda, or cpu");
ABSL_FLAG(int64_t, max_matrix_bytes, int64_t{1} << 30,
          "largest single matrix (input or result) accepted, in bytes");
ABSL_FLAG(int32_t, max_queue_depth, 256,
          "requests waiting per device before new ones get RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_batch_size, 1,
          "small requests (1 MiB or less) of one op, dtype, shape and variant that wait together "
          "run as one batch of at most this many; 1 (the default: on an H200 batches of up to "
          "16 cost 13-15% of 64x64 MatMul throughput) turns batching off");
ABSL_FLAG(int32_t, batch_delay_us, 0,
          "how long the first request of a batch waits for company, in microseconds; 0 batches "
          "only requests already waiting and adds no delay");
ABSL_FLAG(int32_t, worker_spin_us, 1000,
          "CUDA backend: how long a worker that has just finished a request polls for the next "
          "one before it sleeps, in microseconds (one worker per GPU at a time, so at most one "
          "busy core per GPU): a request that follows within it starts without a sleeping "
          "thread's wake-up (on an H200 host, 28-48 us of queue time at one request in flight); "
          "0 turns polling off");
ABSL_FLAG(int32_t, answer_threads, 4,
          "threads that send the answers of finished requests for device workers that have more "
          "requests waiting, so that a worker goes on with the next one meanwhile; a worker with "
          "nothing waiting answers its own (no hand-off at low load). 0: workers always answer "
          "their own (0 to 64)");
ABSL_FLAG(int32_t, cpu_workers, 0, "CPU backend: requests run at once (0: one per core)");
ABSL_FLAG(std::string, devices, "all", "CUDA backend: GPUs to use, \"all\" or a list like 0,1");
ABSL_FLAG(int32_t, streams_per_device, 4, "CUDA backend: requests each GPU runs at once");
ABSL_FLAG(int32_t, batch_graphs_per_stream, 64,
          "CUDA backend: CUDA graphs of small batches' kernels each stream keeps (one per "
          "variant, shape and batch size seen, least recently used dropped first), so a batch "
          "costs one graph launch; 0: launch each member's kernels one by one (0 to 4096)");
ABSL_FLAG(int64_t, tensor_block_cache_bytes, int64_t{64} << 20,
          "CUDA backend: device memory of freed small tensors each GPU keeps for the next tensor "
          "of the same size, so that an op keeping its output allocates and frees without a CUDA "
          "call; blocks of at most 1/64 of it are kept, and it stays under 1/64 of the pool cap. "
          "0: every tensor is allocated from the pool and freed to it");
ABSL_FLAG(int64_t, zero_copy_bytes, int64_t{64} << 10,
          "CUDA backend: a small request whose inputs and result together are at most this many "
          "bytes runs without copies when its variant uses plain loads and stores (the "
          "project's own kernels, not cuBLAS or CUB): the kernel reads the inputs from pinned "
          "host memory and writes the result there. 0: always copy (up to 1048576)");
ABSL_FLAG(double, device_memory_fraction, 0.9,
          "CUDA backend: cap of pooled device memory, as a fraction of each GPU's memory");
ABSL_FLAG(std::string, ceilings, "",
          "JSON file of device ceilings (gpucompute-bench --ceilings_out writes one) used for "
          "roofline fractions in place of the start-up measurement; a figure it leaves out "
          "keeps the measured one");
ABSL_FLAG(bool, profile_counters, true,
          "CUDA backend: read hardware counters (CUPTI's range profiler) when a Profile asks; "
          "false: its rows say counters are turned off here");
ABSL_FLAG(std::string, cupti_library, "libcupti.so.13",
          "CUDA backend: the CUPTI library Profile's counters open (a name on the library path, "
          "or a path)");
ABSL_FLAG(int32_t, profile_counter_max_passes, 32,
          "CUDA backend: replays of one variant the counters may take (the profiler reads a few "
          "counters per pass)");
ABSL_FLAG(int32_t, profile_warmup, 2, "Profile: warm-up runs when the request says 0");
ABSL_FLAG(int32_t, profile_repetitions, 10, "Profile: timed runs when the request says 0");
ABSL_FLAG(std::string, autotune_cache, "",
          "file where \"auto\" keeps its measured choices across restarts (empty: memory only)");
ABSL_FLAG(int32_t, shutdown_grace_seconds, 30,
          "on SIGINT/SIGTERM, how long the calls in flight may take, their answers included "
          "reaching their clients, before they are cancelled (new calls are refused at once); "
          "the exit status is 0 when none had to be, else 1");
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
          "another's id can say who holds it (empty: host:port of the first TCP address of "
          "--listen, with the host name for 0.0.0.0; with only unix sockets, the host name and "
          "the first socket's path, host:/path)");
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
// Bounds of the batching flags: the metric's largest bucket, and a second.
constexpr int32_t kMaxBatchSizeFlag = 256;
constexpr int32_t kMaxBatchDelayUs = 1000000;
// A worker polls at most this long (10 ms) after a request: beyond it, sleeping costs less.
constexpr int32_t kMaxWorkerSpinUs = 10000;
constexpr int32_t kMaxAnswerThreads = 64;

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
    options.batch_graphs_per_stream = absl::GetFlag(FLAGS_batch_graphs_per_stream);
    if (options.batch_graphs_per_stream < 0 || options.batch_graphs_per_stream > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch_graphs_per_stream: must be 0 to 4096, got ", options.batch_graphs_per_stream));
    }
    options.tensor_block_cache_bytes = absl::GetFlag(FLAGS_tensor_block_cache_bytes);
    if (options.tensor_block_cache_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tensor_block_cache_bytes: must be 0 or more, got ", options.tensor_block_cache_bytes));
    }
    options.zero_copy_bytes = absl::GetFlag(FLAGS_zero_copy_bytes);
    if (options.zero_copy_bytes < 0 || options.zero_copy_bytes > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--zero_copy_bytes: must be 0 to 1048576, got ", options.zero_copy_bytes));
    }
    options.device_memory_fraction = absl::GetFlag(FLAGS_device_memory_fraction);
    options.profile_counters = absl::GetFlag(FLAGS_profile_counters);
    options.cupti_library = absl::GetFlag(FLAGS_cupti_library);
    options.profile_counter_max_passes = absl::GetFlag(FLAGS_profile_counter_max_passes);
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

constexpr char kUnixPrefix[] = "unix:";
constexpr char kUnixAbstractPrefix[] = "unix-abstract:";

// One address of --listen.
struct Listener {
  std::string address;  // as given: "0.0.0.0:0", "unix:/run/x.sock", "unix-abstract:x"
  enum class Kind { kTcp, kUnix, kUnixAbstract } kind = Kind::kTcp;
  std::string path;  // kUnix: the socket file; kUnixAbstract: the name
  int port = 0;      // set by gRPC once bound (nonzero means bound, also for unix sockets)
  // kUnix: the socket file this server bound, so that only it is removed at exit.
  dev_t device = 0;
  ino_t inode = 0;

  bool is_unix() const { return kind != Kind::kTcp; }
  // The address with the port bound: what clients dial.
  std::string Bound() const { return kind == Kind::kTcp ? WithPort(address, port) : address; }
};

// --listen: a comma-separated list. gRPC reads each address itself; here an
// address is only classified, its unix path taken out, and the list checked
// for empty elements and repeats.
absl::StatusOr<std::vector<Listener>> ParseListenList(const std::string& text) {
  const std::string example = "e.g. 0.0.0.0:50051,unix:/run/gpucompute/gpucompute.sock";
  std::vector<Listener> listeners;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    Listener l;
    l.address = std::string(absl::StripAsciiWhitespace(part));
    if (l.address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--listen: \"", text,
                                                     "\" has an empty address; give a "
                                                     "comma-separated list of addresses, ",
                                                     example));
    }
    absl::string_view rest = l.address;
    if (absl::ConsumePrefix(&rest, kUnixAbstractPrefix)) {
      l.kind = Listener::Kind::kUnixAbstract;
    } else if (absl::ConsumePrefix(&rest, kUnixPrefix)) {
      l.kind = Listener::Kind::kUnix;
      // unix:///abs/path is unix:/abs/path with an empty authority.
      if (absl::ConsumePrefix(&rest, "//") && !absl::StartsWith(rest, "/")) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address,
                         "\": a unix socket is unix:/absolute/path, unix:///absolute/path or "
                         "unix:relative/path"));
      }
    }
    if (l.is_unix()) {
      l.path = std::string(rest);
      if (l.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address, "\" names no socket, ", example));
      }
      if (l.kind == Listener::Kind::kUnix && l.path.size() >= sizeof(sockaddr_un::sun_path)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--listen: the socket path of \"", l.address, "\" is longer than ",
            sizeof(sockaddr_un::sun_path) - 1, " bytes, the most a unix socket takes"));
      }
    }
    for (const Listener& earlier : listeners) {
      if (earlier.address == l.address) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address, "\" is given twice"));
      }
    }
    listeners.push_back(std::move(l));
  }
  return listeners;
}

// --unix_socket_mode: an octal mode such as 0660; empty: none.
absl::StatusOr<std::optional<mode_t>> ParseSocketMode(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const bool octal = text.size() <= 5 && text.find_first_not_of("01234567") == std::string::npos;
  const unsigned long mode = octal ? std::strtoul(text.c_str(), nullptr, 8) : 0;
  if (!octal || mode > 07777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_mode: \"", text,
                     "\" is not an octal file mode such as 0660 or 0600 (empty: leave the "
                     "socket as created)"));
  }
  return static_cast<mode_t>(mode);
}

// A socket file already at a unix address. gRPC unlinks any socket at the
// path before it binds, a running server's too (which would silently lose
// its clients to this one); so a server still answering there keeps it and
// this one fails to start, as a second server on a TCP port does. One left by
// a server that died without cleaning up (nothing answers) is removed.
// Anything else at the path (a regular file, a directory) is left alone:
// binding fails.
absl::Status ClearStaleSocket(const Listener& l) {
  struct stat st;
  if (lstat(l.path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return absl::OkStatus();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::copy(l.path.begin(), l.path.end(), addr.sun_path);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  const int error = errno;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(absl::StrCat("--listen: another server is listening on ",
                                                      l.address, "; not taking its socket"));
  }
  if (error != ECONNREFUSED) return absl::OkStatus();  // e.g. no permission: binding decides
  if (unlink(l.path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("--listen: cannot remove the stale socket ",
                                                      l.path, ": ", std::strerror(errno)));
  }
  LogInfo(absl::StrCat("removed the stale socket ", l.path,
                       " (left by a server that did not stop cleanly)"));
  return absl::OkStatus();
}

// Once bound: the mode of each unix socket file bound, and its identity for
// the clean-up at exit.
absl::Status SetUpSocketFiles(std::vector<Listener>& listeners, std::optional<mode_t> mode) {
  for (Listener& l : listeners) {
    if (l.kind != Listener::Kind::kUnix || l.port == 0) continue;
    if (mode && chmod(l.path.c_str(), *mode) != 0) {
      return absl::InternalError(
          absl::StrCat("--unix_socket_mode: chmod ", l.path, ": ", std::strerror(errno)));
    }
    struct stat st;
    if (lstat(l.path.c_str(), &st) == 0) {
      l.device = st.st_dev;
      l.inode = st.st_ino;
    }
  }
  return absl::OkStatus();
}

// At exit: the socket files this server bound, unless another took the path.
void RemoveSocketFiles(const std::vector<Listener>& listeners) {
  for (const Listener& l : listeners) {
    struct stat st;
    if (l.kind == Listener::Kind::kUnix && l.inode != 0 && lstat(l.path.c_str(), &st) == 0 &&
        st.st_dev == l.device && st.st_ino == l.inode) {
      unlink(l.path.c_str());
    }
  }
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

std::string HostName() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 && name[0] != 0 ? name : "localhost";
}

// host:port of the first TCP address with the port bound; a wildcard host
// (0.0.0.0, [::], none) becomes the machine's name, which peers can reach.
// With unix sockets only, the machine's name and the first socket's path
// ("host:/run/gpucompute/gpucompute.sock"; "host:unix-abstract:NAME"): a path
// alone would name the servers of every machine alike.
std::string DefaultInstanceName(const std::vector<Listener>& listeners) {
  for (const Listener& l : listeners) {
    if (l.is_unix()) continue;
    std::string host = l.address.substr(0, l.address.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = HostName();
    return absl::StrCat(host, ":", l.port);
  }
  const Listener& first = listeners.front();
  return absl::StrCat(HostName(), ":",
                      first.kind == Listener::Kind::kUnix ? first.path : first.address);
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
  LogInfo(absl::StrCat("host memory: ", HostAllocatorName(ServingAllocator())));
  // absl::Mutex (ours and gRPC's) otherwise keeps a global lock-order graph
  // on every lock and mutex destruction where abseil was built with it on:
  // a global lock and graph work per request on the hot path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
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
  const int32_t max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  if (max_batch_size < 1 || max_batch_size > kMaxBatchSizeFlag) {
    LogError(absl::StrCat("--max_batch_size: must be 1 to ", kMaxBatchSizeFlag, ", got ",
                          max_batch_size));
    return 1;
  }
  const int32_t batch_delay_us = absl::GetFlag(FLAGS_batch_delay_us);
  if (batch_delay_us < 0 || batch_delay_us > kMaxBatchDelayUs) {
    LogError(absl::StrCat("--batch_delay_us: must be 0 to ", kMaxBatchDelayUs, ", got ",
                          batch_delay_us));
    return 1;
  }
  const int32_t worker_spin_us = absl::GetFlag(FLAGS_worker_spin_us);
  if (worker_spin_us < 0 || worker_spin_us > kMaxWorkerSpinUs) {
    LogError(absl::StrCat("--worker_spin_us: must be 0 to ", kMaxWorkerSpinUs, ", got ",
                          worker_spin_us));
    return 1;
  }
  const int32_t answer_threads = absl::GetFlag(FLAGS_answer_threads);
  if (answer_threads < 0 || answer_threads > kMaxAnswerThreads) {
    LogError(absl::StrCat("--answer_threads: must be 0 to ", kMaxAnswerThreads, ", got ",
                          answer_threads));
    return 1;
  }
  // Read before any device opens: a bad file stops start-up at once.
  const std::string ceilings_path = absl::GetFlag(FLAGS_ceilings);
  std::optional<tools::v1::CeilingsFile> ceilings_file;
  if (!ceilings_path.empty()) {
    auto file = ReadCeilingsFile(ceilings_path);
    if (!file.ok()) {
      LogError(std::string(file.status().message()));
      return 1;
    }
    ceilings_file = std::move(*file);
  }
  const int32_t max_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  if (max_streams < 0) {
    LogError(absl::StrCat("--max_concurrent_streams: must be >= 0, got ", max_streams));
    return 1;
  }
  auto listeners = ParseListenList(absl::GetFlag(FLAGS_listen));
  if (!listeners.ok()) {
    LogError(std::string(listeners.status().message()));
    return 1;
  }
  auto socket_mode = ParseSocketMode(absl::GetFlag(FLAGS_unix_socket_mode));
  if (!socket_mode.ok()) {
    LogError(std::string(socket_mode.status().message()));
    return 1;
  }
  for (const Listener& l : *listeners) {
    if (l.kind != Listener::Kind::kUnix) continue;
    if (auto s = ClearStaleSocket(l); !s.ok()) {
      LogError(std::string(s.message()));
      return 1;
    }
  }
  if (*socket_mode) {
    for (const Listener& l : *listeners) {
      if (l.kind == Listener::Kind::kUnixAbstract) {
        LogWarning(absl::StrCat("--unix_socket_mode does not apply to ", l.address,
                                ": an abstract socket has no file, any local process may "
                                "connect to it"));
      }
    }
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
  for (Listener& l : *listeners)
    builder.AddListeningPort(l.address, security->credentials, &l.port);
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
  // With --unix_socket_mode, sockets are created owner-only (umask 0177)
  // until chmod gives them that mode: never wider than asked, even briefly.
  const mode_t old_umask = *socket_mode ? umask(0177) : 0;
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (*socket_mode) umask(old_umask);
  std::vector<std::string> unbound;
  for (const Listener& l : *listeners) {
    if (l.port == 0) unbound.push_back(l.address);
  }
  if (!server && unbound.empty()) {
    for (const Listener& l : *listeners) unbound.push_back(l.address);
  }
  if (!unbound.empty()) {
    LogError(absl::StrCat("cannot listen on ", absl::StrJoin(unbound, ", ")));
    if (server) server->Shutdown();
    (void)SetUpSocketFiles(*listeners, std::nullopt);  // the sockets that did bind go
    RemoveSocketFiles(*listeners);
    return 1;
  }
  if (auto s = SetUpSocketFiles(*listeners, *socket_mode); !s.ok()) {
    LogError(std::string(s.message()));
    server->Shutdown();
    RemoveSocketFiles(*listeners);
    return 1;
  }
  std::vector<std::string> bound;
  for (const Listener& l : *listeners) {
    std::string& text = bound.emplace_back(l.Bound());
    if (l.kind == Listener::Kind::kUnix && *socket_mode) {
      absl::StrAppend(&text, " (mode ", absl::StrFormat("%04o", **socket_mode), ")");
    }
  }
  // The default health service starts out SERVING for ""; correct it at once.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(false);
  health->SetServingStatus(kServiceName, false);
  LogInfo(absl::StrCat("gRPC on ", absl::StrJoin(bound, ", "), " (", security->description,
                       auth ? ", bearer token" : "", "): NOT_SERVING while devices open"));

  auto backend = OpenBackend(absl::GetFlag(FLAGS_backend));
  if (!backend.ok()) {
    LogError(std::string(backend.status().message()));
    server->Shutdown();
    RemoveSocketFiles(*listeners);
    return 1;
  }
  for (const auto& d : backend->devices) {
    LogInfo(absl::StrCat("device ", d->description().name, ": ceilings ",
                         static_cast<int64_t>(d->ceilings().gbytes_per_s), " GB/s copy, ",
                         static_cast<int64_t>(d->ceilings().gbytes_per_s_read), " GB/s read, ",
                         static_cast<int64_t>(d->ceilings().gflops), " GFLOP/s"));
  }
  if (ceilings_file) {
    if (auto s = ApplyCeilings(*ceilings_file, ceilings_path, backend->devices); !s.ok()) {
      LogError(std::string(s.message()));
      server->Shutdown();
      RemoveSocketFiles(*listeners);
      return 1;
    }
  }
  const kernels::Backend kind = backend->kind;
  BatchingOptions batching;
  batching.max_batch_size = max_batch_size;
  batching.delay = absl::Microseconds(batch_delay_us);
  LogInfo(
      max_batch_size == 1
          ? std::string("batching: off (--max_batch_size=1)")
          : absl::StrCat("batching: up to ", max_batch_size, " small requests, ",
                         batch_delay_us == 0
                             ? std::string("only those already waiting (no delay)")
                             : absl::StrCat("waiting up to ", batch_delay_us, " us for company")));
  // The CPU backend's workers never poll: their cores are the ones that compute.
  const absl::Duration worker_spin =
      kind == kernels::Backend::kCuda ? absl::Microseconds(worker_spin_us) : absl::ZeroDuration();
  Scheduler scheduler(std::move(backend->devices), absl::GetFlag(FLAGS_max_queue_depth), batching,
                      worker_spin, answer_threads);
  VariantSelector selector(kernels::DefaultRegistry(), kind);
  if (const std::string cache = absl::GetFlag(FLAGS_autotune_cache); !cache.empty()) {
    if (auto s = selector.UseCacheFile(cache); !s.ok()) {
      LogError(absl::StrCat("--autotune_cache: ", s.message()));
      server->Shutdown();
      scheduler.Shutdown();
      RemoveSocketFiles(*listeners);
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
  if (tensor_options.instance.empty()) tensor_options.instance = DefaultInstanceName(*listeners);
  TensorStore tensors(tensor_options);
  TensorTransfers transfers(tensors, scheduler.devices(), kTensorTransferThreads);
  LogInfo(absl::StrCat("tensors: up to ", tensor_options.limit_bytes, " bytes, idle lifetime ",
                       absl::FormatDuration(tensor_options.default_ttl), ", instance ",
                       tensor_options.instance));
  ComputeEngine engine(kernels::DefaultRegistry(), scheduler, selector, kind, &tensors);
  // Regions go before the devices that unpin them.
  std::unique_ptr<SharedMemoryRegistry> regions =
      SharedMemoryFromFlags(scheduler.devices().front().get());
  service.Activate(engine, &transfers, regions.get());
  metrics.AttachScheduler(&scheduler);
  metrics.AttachTensorStore(&tensors);
  metrics.AttachSharedMemory(regions.get());
  metrics.SetQueueCapacity(int64_t{absl::GetFlag(FLAGS_max_queue_depth)} *
                           int64_t(scheduler.devices().size()));
  metrics.AttachGpuTelemetry(
      GpuSamplerFromFlags(scheduler.devices(), *metrics_endpoint != nullptr));

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
    // One line per address, the first address first (scripts read that one).
    for (const Listener& l : *listeners) {
      std::fprintf(stdout, "gpucompute-server listening on %s\n", l.Bound().c_str());
    }
    std::fflush(stdout);
  }

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LogInfo(absl::StrCat("received ", strsignal(signal_number), ": draining"));
  health->SetServingStatus(false);
  const absl::Time grace_end =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds));
  // gRPC's own drain (Server::Shutdown) closes each connection as soon as
  // its last call's answer is in the socket, and a client still reading it
  // then loses the rest to a reset (see WaitForSocketsToDrain): 1 of 16
  // 32 MiB answers in flight at SIGTERM, in about one run of two. So the
  // service drains first, connections open: it refuses new calls, every
  // call in flight ends (its reactor's OnDone: answered, or cancelled by its
  // client), and their answers leave the sockets; only then does gRPC close
  // the connections, all idle by then.
  service.StopAdmitting();
  const int64_t admitted = service.calls_in_flight();
  const int64_t started_before = service.calls_started();
  const int64_t answered_before = service.calls_answered();
  const int64_t cancelled_before = service.calls_cancelled();
  while (service.calls_in_flight() > 0 && absl::Now() < grace_end) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const int64_t cut_off = service.calls_in_flight();
  const int64_t unsent_bytes = WaitForSocketsToDrain(grace_end);
  // Stops accepting, cancels what is left (calls still running when the
  // grace ran out) and closes the connections at once: they are idle, and
  // gRPC's graceful close of an idle connection whose client keeps its
  // channel open took 20 s more (measured).
  server->Shutdown(absl::ToChronoTime(absl::Now()));
  scheduler.Shutdown();
  server->Wait();
  RemoveSocketFiles(*listeners);
  metrics.AttachScheduler(nullptr);  // the scheduler goes before the endpoint
  metrics.AttachTensorStore(nullptr);
  metrics.AttachSharedMemory(nullptr);
  metrics.AttachGpuTelemetry(nullptr);  // stops the sampler
  // Calls that arrived while draining were refused (answered UNAVAILABLE).
  const int64_t refused = service.calls_started() - started_before;
  const int64_t answered =
      std::max<int64_t>(0, service.calls_answered() - answered_before - refused);
  const int64_t cancelled = service.calls_cancelled() - cancelled_before;
  const bool clean = cut_off == 0 && unsent_bytes == 0;
  std::string summary = absl::StrCat("stopped: of ", admitted, " call(s) in flight at the signal, ",
                                     answered, " answered, ", cancelled,
                                     " cancelled (by their clients, or at the grace: ", cut_off,
                                     "); ", refused, " new call(s) refused while draining; ");
  absl::StrAppend(&summary, unsent_bytes == 0
                                ? std::string("every answer left for its client")
                                : absl::StrCat(unsent_bytes,
                                               " bytes of answers not yet taken by their clients "
                                               "when the grace ran out"));
  (clean ? LogInfo : LogError)(summary);
  // Every call is done. gRPC's own teardown (grpc_shutdown, run as the last
  // gRPC object goes) can then wait up to ~10 s on an internal timer; the
  // exit does not wait for it.
  const int exit_code = clean ? 0 : 1;
  std::thread([exit_code] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::fflush(nullptr);
    std::_Exit(exit_code);
  }).detach();
  return exit_code;
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
