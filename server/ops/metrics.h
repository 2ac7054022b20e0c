// Prometheus metrics. The service records every finished request (count by
// op, variant, dtype, device and status code; latency by stage, bytes);
// queue depth and the devices' memory and health are read from the
// scheduler at each scrape, so they are never stale; the GPUs' own gauges
// come from a sampler (gpu_sampler.h). Names are prefixed gpucompute_.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gpucompute/kernels/problem.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/ops/metrics_http.h"
#include "server/ops/striped_counter.h"
#include "server/ops/striped_histogram.h"

namespace gpucompute::server {

class Scheduler;
class TensorStore;
class SharedMemoryRegistry;

// The `op` label a call is counted under: "matmul", "list_tensors", ...
// (server/grpc/rpc_ops.h derives each rpc's from its name). `label` points
// at storage that outlives the metrics (a literal, or the gRPC layer's
// table). `compute` is set for MatMul, Transpose and Reduce, the calls with
// batch-size and bytes histograms.
struct RpcOp {
  absl::string_view label;
  std::optional<kernels::Op> compute;
};
// The op of a compute call, labelled kernels::OpName(op).
RpcOp ComputeRpcOp(kernels::Op op);

// Where a successful request spent its time, in microseconds. Stages a
// request does not have (GetServerInfo never queues) stay negative: their
// series are never made.
struct StageLatencies {
  int64_t queue_us = -1;
  int64_t upload_us = -1;
  int64_t compute_us = -1;
  int64_t download_us = -1;
  int64_t total_us = -1;
  // Compute requests: how many ran together as one batch, this one included
  // (0: not a compute request; not observed).
  int batch_size = 0;
};

// What a finished request is counted under besides its op and status. Every
// value comes from a closed set (the variant ladders, the dtypes, the
// devices opened), never from a shape or a client's text, so the number of
// series stays bounded; "" is counted as "none".
struct RequestLabels {
  std::string variant;  // the variant that ran or was chosen
  std::string dtype;    // kernels::DTypeName of the request's matrices
  std::string device;   // DeviceLabel of the device that ran it
  // Bytes of the matrices read and written (operands and result); observed
  // for successful requests when >= 0.
  int64_t bytes = -1;
};

// "cuda:0 NVIDIA H200" -> "cuda:0": short, stable label values for
// dashboards; the model goes to gpucompute_device_info.
std::string DeviceLabel(const std::string& device_name);

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // A request entered a handler (it counts as in flight until RequestFinished).
  void RequestStarted();
  // Counts the request once under (op, labels, code). Latencies and bytes
  // are observed for successful requests only.
  void RequestFinished(RpcOp op, RequestLabels labels, absl::StatusCode code,
                       const StageLatencies& latencies);

  // Queue and device metrics come from `scheduler` once it is set; null
  // detaches it, waiting for a scrape in progress. The scheduler must
  // outlive its attachment.
  void AttachScheduler(const Scheduler* scheduler);
  // Tensor counters (held bytes, count, expiries, budget) come from `store`
  // once set; the same rules as AttachScheduler.
  void AttachTensorStore(const TensorStore* store);
  // Shared-memory regions (count, registered and pinned bytes) come from
  // `regions` once set; the same rules again.
  void AttachSharedMemory(const SharedMemoryRegistry* regions);

  // The GPUs' own gauges (utilization, power, ...) come from `gpus` once
  // set; null detaches it, as above.
  void AttachGpuTelemetry(std::shared_ptr<const prometheus::Collectable> gpus);
  // The most requests the queues hold (--max_queue_depth times the devices),
  // exported for the queue alert; 0 until known.
  void SetQueueCapacity(int64_t requests);

  // Everything above, for the /metrics endpoint (or a test) to collect.
  std::shared_ptr<prometheus::Collectable> collectable() const { return collectable_; }

 private:
  class SchedulerCollector;
  class TensorCollector;
  class SharedMemoryCollector;
  class AttachedCollector;
  static constexpr int kStages = 5;
  static constexpr int kStatusCodes = 17;  // OK (0) to UNAUTHENTICATED (16)

  // The series of one (op, variant, dtype, device), each made on first use
  // and kept: looking one up in its family builds and hashes a label map.
  struct Series {
    std::array<StripedCounter*, kStatusCodes> by_code{};
    // Each stage's, made when a successful request first has that stage.
    std::array<StripedHistogram*, kStages> latency{};
  };
  // (op label, variant, dtype, device)
  using SeriesKey = std::tuple<absl::string_view, std::string, std::string, std::string>;
  // The series a thread used last, and whose (Metrics::id_) they are.
  struct LastSeries {
    uint64_t metrics = 0;
    SeriesKey key;
    Series series;
  };
  // The series of `key` with its counter of `code` and the histograms of
  // `stages` (the stages observed) made: a copy of the pointers, from the
  // thread's last series when it is the same, else read under the lock
  // (shared for a series seen before).
  Series SeriesFor(SeriesKey key, int code, const std::array<bool, kStages>& stages);
  void MakeSeries(const SeriesKey& key, Series& series, int code,
                  const std::array<bool, kStages>& stages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(series_mu_);

  const uint64_t id_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<CounterFamily> requests_;
  std::shared_ptr<HistogramFamily> latency_;
  absl::Mutex series_mu_;
  absl::flat_hash_map<SeriesKey, Series> series_ ABSL_GUARDED_BY(series_mu_);
  std::shared_ptr<InFlightGauge> in_flight_;
  prometheus::Gauge& queue_capacity_;
  // [kernels::Op]: the batch size each successful compute request ran in,
  // and its bytes; made up front, so recording them takes no lock.
  std::shared_ptr<HistogramFamily> batch_sizes_;
  std::shared_ptr<HistogramFamily> request_bytes_;
  std::array<StripedHistogram*, kernels::kOpCount> batch_size_{};
  std::array<StripedHistogram*, kernels::kOpCount> bytes_{};
  std::shared_ptr<SchedulerCollector> scheduler_collector_;
  std::shared_ptr<TensorCollector> tensor_collector_;
  std::shared_ptr<SharedMemoryCollector> shm_collector_;
  std::shared_ptr<AttachedCollector> gpu_collector_;
  std::shared_ptr<prometheus::Collectable> collectable_;
};

// The HTTP endpoint serving GET /metrics in the Prometheus text format.
class MetricsEndpoint {
 public:
  // Listens on `address` (host:port; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                const Metrics& metrics);
  ~MetricsEndpoint();

  // The address with the port actually bound, e.g. "0.0.0.0:8002".
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<MetricsHttpServer> http_;
  std::string address_;
};

}  // namespace gpucompute::server
