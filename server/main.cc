// gpucompute-server: serves MatMul, Transpose, Reduce, Profile and
// GetServerInfo over gRPC on the GPUs (or the CPU when none is usable).
//
// Start-up, in order: the flags, checked before anything slow starts
// (server_flags.cc); the gRPC port, answering NOT_SERVING (grpc_server.cc);
// the devices (backend_flags.cc) and what runs requests on them; then
// SERVING until SIGINT or SIGTERM, and the drain (shutdown.cc).
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpucompute/common/flags_usage.h"
#include "server/backend_flags.h"
#include "server/ceilings_file.h"
#include "server/cpu/cpu_device.h"
#include "server/engine/compute_engine.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/tensor_transfers.h"
#include "server/engine/variant_selector.h"
#include "server/gpu_metrics_flags.h"
#include "server/grpc/compute_service.h"
#include "server/grpc_server.h"
#include "server/ops/awake_cores.h"
#include "server/ops/host_memory.h"
#include "server/ops/log.h"
#include "server/ops/metrics.h"
#include "server/server_flags.h"
#include "server/shared_memory_flags.h"
#include "server/shutdown.h"

namespace gpucompute::server {
namespace {

// Threads moving tensor bytes to and from the devices: enough for a few
// uploads and downloads at once (each waits on its copies).
constexpr int kTensorTransferThreads = 8;

// The devices --backend opens, their ceilings logged and those of the
// --ceilings file applied.
absl::StatusOr<Backend> OpenDevices(const ServerOptions& options) {
  // What the file gives, the CPU does not measure (its start-up's longest step).
  auto backend = OpenBackendFromFlags(
      options.ceilings ? GivenCeilings(*options.ceilings, kCpuDeviceName) : Ceilings{});
  if (!backend.ok()) return backend.status();
  for (const auto& d : backend->devices) {
    LogInfo(absl::StrCat("device ", d->description().name, ": ceilings ",
                         static_cast<int64_t>(d->ceilings().gbytes_per_s), " GB/s copy, ",
                         static_cast<int64_t>(d->ceilings().gbytes_per_s_read), " GB/s read, ",
                         static_cast<int64_t>(d->ceilings().gflops), " GFLOP/s"));
  }
  if (options.ceilings) {
    if (absl::Status s = ApplyCeilings(*options.ceilings, options.ceilings_path, backend->devices);
        !s.ok()) {
      return s;
    }
  }
  return backend;
}

void LogBatching(const BatchingOptions& batching) {
  const int32_t delay_us = static_cast<int32_t>(absl::ToInt64Microseconds(batching.delay));
  LogInfo(batching.max_batch_size == 1
              ? std::string("batching: off")
              : absl::StrCat("batching: up to ", batching.max_batch_size, " small requests, ",
                             delay_us == 0
                                 ? std::string("only those already waiting (no delay)")
                                 : absl::StrCat("waiting up to ", delay_us, " us for company")));
}

// --tensor_memory_bytes of -1 is half of the devices' budgets; an empty
// --instance_name is derived from the addresses bound.
TensorStoreOptions TensorStoreOptionsFor(const ServerOptions& options, const Scheduler& scheduler) {
  TensorStoreOptions tensor_options;
  tensor_options.limit_bytes = options.tensors.memory_bytes;
  if (tensor_options.limit_bytes < 0) {
    int64_t budget = 0;
    for (const auto& d : scheduler.devices()) budget += d->memory_budget_bytes();
    tensor_options.limit_bytes = budget / 2;
  }
  tensor_options.default_ttl = options.tensors.ttl;
  tensor_options.max_ttl = options.tensors.max_ttl;
  tensor_options.instance = options.tensors.instance_name;
  if (tensor_options.instance.empty()) {
    tensor_options.instance = DefaultInstanceName(options.serving.listeners);
  }
  return tensor_options;
}

// After --idle_trim_seconds without calls: the kept response buffers freed
// and free heap memory returned to the system.
void StartIdleTrimmer(int32_t idle_seconds, ComputeService& service,
                      std::optional<IdleMemoryTrimmer>& trimmer) {
  if (idle_seconds <= 0) return;
  trimmer.emplace(
      absl::Seconds(idle_seconds),
      [&service] {
        return IdleMemoryTrimmer::Activity{service.calls_started(), service.calls_in_flight()};
      },
      [&service] {
        const int64_t freed = service.ReleaseRetainedBuffers();
        LogInfo(absl::StrCat("idle: freed ", freed >> 20,
                             " MiB of kept response buffers; returning free heap memory"));
      });
}

int Run() {
  // Signals are taken synchronously by this thread; blocked before any
  // other thread starts so that none of those receives them. Loading the
  // registry already starts the CUDA driver's threads (it asks the devices'
  // compute capability): a thread started before would take a SIGTERM with
  // its default action and end the server without a drain.
  const sigset_t signals = BlockStopSignals();
  // A broken ladder table (a duplicate or launcher-less variant) stops start-up.
  if (auto registry = kernels::LoadDefaultRegistry(); !registry.ok()) {
    LogError(absl::StrCat("variant registry: ", registry.status().message()));
    return 1;
  }
  if (absl::Status s = SetUpLoggingFromFlags(); !s.ok()) {
    LogError(std::string(s.message()));
    return 1;
  }
  KeepLargeAllocationsInHeap();
  LogInfo(absl::StrCat("host memory: ", HostAllocatorName(ServingAllocator())));
  // absl::Mutex (ours and gRPC's) otherwise keeps a global lock-order graph
  // on every lock and mutex destruction where abseil was built with it on:
  // a global lock and graph work per request on the hot path.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Configuration mistakes stop the server before anything slow starts.
  absl::StatusOr<ServerOptions> parsed = ServerOptionsFromFlags();
  if (!parsed.ok()) {
    LogError(std::string(parsed.status().message()));
    return 1;
  }
  for (const absl::Status& s :
       {CheckBackendFlags(), CheckSharedMemoryFlags(), CheckGpuMetricsFlags()}) {
    if (!s.ok()) {
      LogError(std::string(s.message()));
      return 1;
    }
  }
  ServerOptions& options = *parsed;
  const std::vector<Listener>& listeners = options.serving.listeners;
  if (absl::Status s = PrepareListeners(options.serving); !s.ok()) {
    LogError(std::string(s.message()));
    return 1;
  }

  Metrics metrics;
  auto metrics_endpoint = StartMetricsFromFlags(metrics);
  if (!metrics_endpoint.ok()) {
    LogError(std::string(metrics_endpoint.status().message()));
    return 1;
  }
  ServiceConfig config = options.service;
  config.version = GPUCOMPUTE_VERSION;
  const BearerTokenAuth* auth = options.serving.auth ? &*options.serving.auth : nullptr;
  ComputeService service(kernels::DefaultRegistry(), config, metrics, auth);
  // Declared before the server: its threads stop after the server did.
  std::optional<ComputeQueues> queues;
  if (options.serving.grpc_queues > 0) queues.emplace(service, options.serving.grpc_queues);
  auto started = StartGrpcServer(options.serving, config.limits.max_matrix_bytes, service,
                                 queues ? &*queues : nullptr);
  if (!started.ok()) {
    LogError(std::string(started.status().message()));
    return 1;
  }
  std::unique_ptr<grpc::Server> server = std::move(*started);
  // Start-up failures from here on close the port and its socket files.
  const auto fail = [&](absl::string_view message) {
    LogError(std::string(message));
    server->Shutdown();
    RemoveSocketFiles(listeners);
    return 1;
  };

  auto backend = OpenDevices(options);
  if (!backend.ok()) return fail(backend.status().message());
  const kernels::Backend kind = backend->kind;
  const SchedulingOptions& scheduling = options.scheduling;
  const BatchingOptions batching = scheduling.BatchingOn(kind);
  LogBatching(batching);
  // The CPU backend's workers never poll: their cores are the ones that compute.
  const absl::Duration worker_spin = kind == kernels::Backend::kCuda
                                         ? absl::Microseconds(scheduling.worker_spin_us)
                                         : absl::ZeroDuration();
  Scheduler scheduler(std::move(backend->devices), scheduling.max_queue_depth, batching,
                      worker_spin, scheduling.answer_threads, scheduling.inline_threads);
  VariantSelector selector(kernels::DefaultRegistry(), kind);
  if (const std::string& cache = scheduling.autotune_cache; !cache.empty()) {
    if (absl::Status s = selector.UseCacheFile(cache); !s.ok()) {
      LogError(absl::StrCat("--autotune_cache: ", s.message()));
      server->Shutdown();
      scheduler.Shutdown();
      RemoveSocketFiles(listeners);
      return 1;
    }
    LogInfo(absl::StrCat("autotune cache: ", cache));
  }
  // Tensors: declared after the scheduler, so they are freed while their
  // devices are still open.
  const TensorStoreOptions tensor_options = TensorStoreOptionsFor(options, scheduler);
  TensorStore tensors(tensor_options);
  TensorTransfers transfers(tensors, scheduler.devices(), kTensorTransferThreads);
  LogInfo(absl::StrCat("tensors: up to ", tensor_options.limit_bytes, " bytes, idle lifetime ",
                       absl::FormatDuration(tensor_options.default_ttl), ", instance ",
                       tensor_options.instance));
  ComputeEngine engine(kernels::DefaultRegistry(), scheduler, selector, kind, &tensors,
                       {.calibrate_as_served = options.scheduling.calibrate_as_served});
  // Regions go before the devices that unpin them.
  std::unique_ptr<SharedMemoryRegistry> regions =
      SharedMemoryFromFlags(scheduler.devices().front().get());
  service.Activate(engine, &transfers, regions.get());
  metrics.AttachScheduler(&scheduler);
  metrics.AttachTensorStore(&tensors);
  metrics.AttachSharedMemory(regions.get());
  metrics.SetQueueCapacity(int64_t{scheduling.max_queue_depth} *
                           int64_t(scheduler.devices().size()));
  metrics.AttachGpuTelemetry(
      GpuSamplerFromFlags(scheduler.devices(), *metrics_endpoint != nullptr));

  // Start-up's probes (ceilings, calibration buffers) are freed by now; the
  // heap keeps them unless told to give them back.
  ReturnFreeHeapToSystem();
  std::optional<IdleMemoryTrimmer> trimmer;
  StartIdleTrimmer(options.idle_trim_seconds, service, trimmer);
  std::optional<AwakeCores> awake_cores;
  if (options.keep_cores_awake_us > 0) {
    awake_cores.emplace(absl::Microseconds(options.keep_cores_awake_us), [&service] {
      return AwakeCores::Activity{service.calls_started(), service.calls_in_flight()};
    });
    LogInfo(absl::StrCat("keeping ", awake_cores->cores(),
                         " cores awake while calls are in "
                         "flight and ",
                         options.keep_cores_awake_us, " us after"));
  }

  // A stop requested during start-up drains at once, never showing SERVING.
  if (!StopSignalPending()) {
    MarkServing(*server);
    // One line per address, the first address first (scripts read that one).
    for (const Listener& l : listeners) {
      std::fprintf(stdout, "gpucompute-server listening on %s\n", l.Bound().c_str());
    }
    std::fflush(stdout);
  }
  return WaitForStopAndDrain(signals, options.shutdown_grace,
                             {*server, service, scheduler, metrics, listeners});
}

}  // namespace
}  // namespace gpucompute::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpucompute-server: GPU MatMul, Transpose and Reduce over gRPC.\n"
      "  gpucompute-server --listen=0.0.0.0:50051 --backend=auto");
  gpucompute::common::HandleHelpAndVersion(argc, argv, "gpucompute-server", GPUCOMPUTE_VERSION);
  absl::ParseCommandLine(argc, argv);
  return gpucompute::server::Run();
}
