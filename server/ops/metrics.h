// Prometheus metrics. The service records every finished request (count by
// op, variant and status code; latency by stage); queue depth and the
// devices' memory and health are read from the scheduler at each scrape, so
// they are never stale. Names are prefixed gpucompute_.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/ops/metrics_http.h"

namespace gpucompute::server {

class Scheduler;
class TensorStore;
class SharedMemoryRegistry;

// Label values of the `op` label.
enum class RpcOp {
  kMatMul,
  kTranspose,
  kReduce,
  kProfile,
  kServerInfo,
  kUpload,
  kDownload,
  kReleaseTensors,
  kListTensors,
  kSharedMemory,  // RegisterSharedMemory, UnregisterSharedMemory, ListSharedMemory
};
constexpr int kRpcOpCount = 10;
const char* RpcOpName(RpcOp op);

// Where a successful request spent its time, in microseconds. Stages a
// request does not have (GetServerInfo never queues) stay negative and are
// not observed.
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

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // A request entered a handler (it counts as in flight until RequestFinished).
  void RequestStarted();
  // Counts the request once under (op, variant, code); `variant` is the
  // variant that ran or was chosen, "none" when no single variant applies.
  // Latencies are observed for successful requests only.
  void RequestFinished(RpcOp op, const std::string& variant, absl::StatusCode code,
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

  // Everything above, for the /metrics endpoint (or a test) to collect.
  std::shared_ptr<prometheus::Collectable> collectable() const { return collectable_; }

 private:
  class SchedulerCollector;
  class TensorCollector;
  class SharedMemoryCollector;
  static constexpr int kStages = 5;
  static constexpr int kStatusCodes = 17;  // OK (0) to UNAUTHENTICATED (16)

  // The counter of (op, variant, code), made on first use and kept: looking
  // it up in the family builds and hashes a label map on every request.
  prometheus::Counter& RequestCounter(RpcOp op, const std::string& variant, absl::StatusCode code);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  absl::Mutex counters_mu_;
  // [op][code]: variant -> counter.
  std::array<std::array<absl::flat_hash_map<std::string, prometheus::Counter*>, kStatusCodes>,
             kRpcOpCount>
      counters_ ABSL_GUARDED_BY(counters_mu_);
  prometheus::Gauge& in_flight_;
  // [op][stage], created up front so recording takes no lock.
  std::array<std::array<prometheus::Histogram*, kStages>, kRpcOpCount> latency_{};
  // [op]: the batch size each successful compute request ran in.
  std::array<prometheus::Histogram*, kRpcOpCount> batch_size_{};
  std::shared_ptr<SchedulerCollector> scheduler_collector_;
  std::shared_ptr<TensorCollector> tensor_collector_;
  std::shared_ptr<SharedMemoryCollector> shm_collector_;
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
