#include "server/ops/metrics.h"

#include <atomic>
#include <exception>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/engine/scheduler.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_store.h"
#include "server/ops/metric_family.h"

namespace gpucompute::server {
namespace {

constexpr std::array<const char*, 5> kStageNames = {"queue", "upload", "compute", "download",
                                                    "total"};

// 10 us (a small transpose's queue wait) to 2 min (a large Profile).
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025,
          0.05, 0.1,    0.25, 0.5,  1,      2.5,  5,    10,     30,   60,   120};
}

// Powers of two up to the largest batch worth allowing.
prometheus::Histogram::BucketBoundaries BatchSizeBuckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256};
}

// Powers of four from 64 B (a 4x4 float matrix) to 4 GiB (MatMul's two
// operands at the default --max_matrix_bytes, and the result).
prometheus::Histogram::BucketBoundaries ByteBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 64; v <= 4.0 * (int64_t{1} << 30); v *= 4) b.push_back(v);
  return b;
}

const std::string& NoneIfEmpty(const std::string& value) {
  static const std::string kNone = "none";
  return value.empty() ? kNone : value;
}

prometheus::ClientMetric Sample(double value, std::vector<prometheus::ClientMetric::Label> labels,
                                prometheus::MetricType type) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// Concatenates the registry's families with those read at scrape time.
class Combined final : public prometheus::Collectable {
 public:
  Combined(std::shared_ptr<prometheus::Collectable> a, std::shared_ptr<prometheus::Collectable> b)
      : a_(std::move(a)), b_(std::move(b)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> all = a_->Collect();
    std::vector<prometheus::MetricFamily> more = b_->Collect();
    all.insert(all.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
    return all;
  }

 private:
  std::shared_ptr<prometheus::Collectable> a_, b_;
};

}  // namespace

std::string DeviceLabel(const std::string& device_name) {
  return device_name.substr(0, device_name.find(' '));
}

RpcOp ComputeRpcOp(kernels::Op op) { return RpcOp{kernels::OpName(op), op}; }

// Reads queue depth and device counters when Prometheus scrapes, instead of
// mirroring them into gauges that could lag.
class Metrics::SchedulerCollector final : public prometheus::Collectable {
 public:
  void Attach(const Scheduler* scheduler) {
    absl::MutexLock lock(&mu_);
    scheduler_ = scheduler;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    absl::MutexLock lock(&mu_);
    if (scheduler_ == nullptr) return {};  // still opening devices, or stopping
    auto queued =
        ScrapedFamily("gpucompute_requests_queued",
                      "Requests admitted and waiting for a device worker.", MetricType::Gauge);
    queued.metric.push_back(Sample(double(scheduler_->queued()), {}, MetricType::Gauge));
    auto running = ScrapedFamily("gpucompute_requests_running", "Requests running on a device now.",
                                 MetricType::Gauge);
    running.metric.push_back(Sample(double(scheduler_->running()), {}, MetricType::Gauge));

    auto info = ScrapedFamily("gpucompute_device_info",
                              "Constant 1 per device; `name` is its full name.", MetricType::Gauge);
    auto healthy = ScrapedFamily("gpucompute_device_healthy",
                                 "1 while the device serves, 0 after a fatal error took it out.",
                                 MetricType::Gauge);
    auto memory = ScrapedFamily("gpucompute_device_memory_bytes", "Total memory of the device.",
                                MetricType::Gauge);
    auto pool = ScrapedFamily("gpucompute_device_pool_bytes",
                              "Pooled device memory: kind=used (held by requests) or kind=reserved "
                              "(obtained from the driver, used or cached).",
                              MetricType::Gauge);
    auto mallocs =
        ScrapedFamily("gpucompute_device_malloc_calls_total",
                      "Device memory allocations that reached the driver.", MetricType::Counter);
    auto growths =
        ScrapedFamily("gpucompute_device_pool_growths_total",
                      "Times the device memory pool grew its reservation.", MetricType::Counter);
    auto host_allocs = ScrapedFamily("gpucompute_host_alloc_calls_total",
                                     "Pinned host staging allocations.", MetricType::Counter);
    auto graph_captures = ScrapedFamily(
        "gpucompute_cuda_graph_captures_total",
        "CUDA graphs captured (and launched once) of a repeated small request (work=request) or "
        "small batch (work=batch).",
        MetricType::Counter);
    auto graph_replays = ScrapedFamily(
        "gpucompute_cuda_graph_replays_total",
        "Small requests (work=request) and small batches (work=batch) launched again from a CUDA "
        "graph captured before.",
        MetricType::Counter);
    for (const auto& device : scheduler_->devices()) {
      const std::string id = DeviceLabel(device->description().name);
      const DeviceCounters c = device->counters();
      info.metric.push_back(
          Sample(1, {{"device", id}, {"name", device->description().name}}, MetricType::Gauge));
      healthy.metric.push_back(Sample(c.healthy ? 1 : 0, {{"device", id}}, MetricType::Gauge));
      memory.metric.push_back(
          Sample(double(device->description().memory_bytes), {{"device", id}}, MetricType::Gauge));
      pool.metric.push_back(
          Sample(double(c.pool_used_bytes), {{"device", id}, {"kind", "used"}}, MetricType::Gauge));
      pool.metric.push_back(Sample(double(c.pool_reserved_bytes),
                                   {{"device", id}, {"kind", "reserved"}}, MetricType::Gauge));
      mallocs.metric.push_back(
          Sample(double(c.device_malloc_calls), {{"device", id}}, MetricType::Counter));
      growths.metric.push_back(
          Sample(double(c.pool_growths), {{"device", id}}, MetricType::Counter));
      host_allocs.metric.push_back(
          Sample(double(c.host_alloc_calls), {{"device", id}}, MetricType::Counter));
      for (auto [work, captures, replays] :
           {std::tuple{"request", c.request_graph_captures, c.request_graph_replays},
            std::tuple{"batch", c.batch_graph_captures, c.batch_graph_replays}}) {
        graph_captures.metric.push_back(
            Sample(double(captures), {{"device", id}, {"work", work}}, MetricType::Counter));
        graph_replays.metric.push_back(
            Sample(double(replays), {{"device", id}, {"work", work}}, MetricType::Counter));
      }
    }
    return {std::move(queued),         std::move(running),      std::move(info),
            std::move(healthy),        std::move(memory),       std::move(pool),
            std::move(mallocs),        std::move(growths),      std::move(host_allocs),
            std::move(graph_captures), std::move(graph_replays)};
  }

 private:
  mutable absl::Mutex mu_;
  const Scheduler* scheduler_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Reads the tensor store's counters at each scrape.
class Metrics::TensorCollector final : public prometheus::Collectable {
 public:
  void Attach(const TensorStore* store) {
    absl::MutexLock lock(&mu_);
    store_ = store;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    absl::MutexLock lock(&mu_);
    if (store_ == nullptr) return {};
    const TensorCounters c = store_->counters();
    auto held = ScrapedFamily("gpucompute_tensor_held_bytes",
                              "Bytes of tensors held on the server (listed, uploading, or released "
                              "while an op still reads them).",
                              MetricType::Gauge);
    held.metric.push_back(Sample(double(c.held_bytes), {}, MetricType::Gauge));
    auto limit = ScrapedFamily("gpucompute_tensor_limit_bytes",
                               "Tensor budget (--tensor_memory_bytes).", MetricType::Gauge);
    limit.metric.push_back(Sample(double(c.limit_bytes), {}, MetricType::Gauge));
    auto count = ScrapedFamily("gpucompute_tensors", "Tensors listed now.", MetricType::Gauge);
    count.metric.push_back(Sample(double(c.tensors), {}, MetricType::Gauge));
    auto created = ScrapedFamily("gpucompute_tensors_created_total",
                                 "Tensors listed since start (uploads and kept outputs).",
                                 MetricType::Counter);
    created.metric.push_back(Sample(double(c.created), {}, MetricType::Counter));
    auto expired = ScrapedFamily("gpucompute_tensor_expiries_total",
                                 "Tensors dropped after their idle lifetime (--tensor_ttl).",
                                 MetricType::Counter);
    expired.metric.push_back(Sample(double(c.expired), {}, MetricType::Counter));
    return {std::move(held), std::move(limit), std::move(count), std::move(created),
            std::move(expired)};
  }

 private:
  mutable absl::Mutex mu_;
  const TensorStore* store_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class Metrics::SharedMemoryCollector final : public prometheus::Collectable {
 public:
  void Attach(const SharedMemoryRegistry* regions) {
    absl::MutexLock lock(&mu_);
    regions_ = regions;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    absl::MutexLock lock(&mu_);
    if (regions_ == nullptr) return {};
    int64_t registered = 0, pinned = 0;
    const std::vector<SharedMemoryRegionInfo> list = regions_->List();
    for (const SharedMemoryRegionInfo& r : list) {
      registered += r.byte_size;
      if (r.pinned) pinned += r.byte_size;
    }
    auto count = ScrapedFamily("gpucompute_shared_memory_regions",
                               "Shared-memory regions registered now.", MetricType::Gauge);
    count.metric.push_back(Sample(double(list.size()), {}, MetricType::Gauge));
    auto bytes = ScrapedFamily("gpucompute_shared_memory_registered_bytes",
                               "Bytes of the registered shared-memory regions.", MetricType::Gauge);
    bytes.metric.push_back(Sample(double(registered), {}, MetricType::Gauge));
    auto locked =
        ScrapedFamily("gpucompute_shared_memory_pinned_bytes",
                      "Of those, bytes pinned for DMA (locked in host RAM).", MetricType::Gauge);
    locked.metric.push_back(Sample(double(pinned), {}, MetricType::Gauge));
    return {std::move(count), std::move(bytes), std::move(locked)};
  }

 private:
  mutable absl::Mutex mu_;
  const SharedMemoryRegistry* regions_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Forwards to a collectable attached later (the GPU sampler), or to none.
class Metrics::AttachedCollector final : public prometheus::Collectable {
 public:
  void Attach(std::shared_ptr<const prometheus::Collectable> source) {
    absl::MutexLock lock(&mu_);
    source_ = std::move(source);
  }
  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    return source_ == nullptr ? std::vector<prometheus::MetricFamily>{} : source_->Collect();
  }

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const prometheus::Collectable> source_ ABSL_GUARDED_BY(mu_);
};

namespace {
// Numbers each Metrics, so that a thread's cached series (SeriesFor) is
// never taken for another's, even one made later at the same address.
std::atomic<uint64_t> metrics_made{0};
}  // namespace

Metrics::Metrics()
    : id_(metrics_made.fetch_add(1, std::memory_order_relaxed) + 1),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_(std::make_shared<CounterFamily>(
          "gpucompute_requests_total",
          "Finished requests by op, variant, dtype, device and gRPC status code (\"none\" where "
          "the request got no further than validation).")),
      latency_(std::make_shared<HistogramFamily>(
          "gpucompute_request_duration_seconds",
          "Latency of successful requests by stage: queue (waiting for a device), upload, "
          "compute, download, and total (received to answered); by op, variant, dtype and "
          "device.")),
      in_flight_(std::make_shared<InFlightGauge>(
          "gpucompute_requests_in_flight",
          "Requests received and not yet answered (queued, running, or being validated).")),
      queue_capacity_(prometheus::BuildGauge()
                          .Name("gpucompute_queue_capacity")
                          .Help("The most requests the admission queues hold: --max_queue_depth "
                                "per device, times the devices.")
                          .Register(*registry_)
                          .Add({})),
      scheduler_collector_(std::make_shared<SchedulerCollector>()),
      tensor_collector_(std::make_shared<TensorCollector>()),
      shm_collector_(std::make_shared<SharedMemoryCollector>()),
      gpu_collector_(std::make_shared<AttachedCollector>()) {
  batch_sizes_ = std::make_shared<HistogramFamily>(
      "gpucompute_request_batch_size",
      "Successful compute requests by the size of the batch they ran in (1: alone); see "
      "--max_batch_size and --batch_delay_us.");
  request_bytes_ = std::make_shared<HistogramFamily>(
      "gpucompute_request_bytes",
      "Successful compute requests by the bytes of the matrices they read and wrote (operands "
      "and result, wherever they lay).");
  for (kernels::Op op : kernels::kAllOps) {
    batch_size_[int(op)] = &batch_sizes_->Add({{"op", kernels::OpName(op)}}, BatchSizeBuckets());
    bytes_[int(op)] = &request_bytes_->Add({{"op", kernels::OpName(op)}}, ByteBuckets());
  }
  collectable_ = std::make_shared<Combined>(
      std::make_shared<Combined>(registry_, std::make_shared<Combined>(requests_, in_flight_)),
      std::make_shared<Combined>(
          std::make_shared<Combined>(latency_,
                                     std::make_shared<Combined>(batch_sizes_, request_bytes_)),
          std::make_shared<Combined>(
              scheduler_collector_,
              std::make_shared<Combined>(
                  tensor_collector_, std::make_shared<Combined>(shm_collector_, gpu_collector_)))));
}

void Metrics::RequestStarted() { in_flight_->Begin(); }

void Metrics::RequestFinished(RpcOp op, RequestLabels labels, absl::StatusCode code,
                              const StageLatencies& latencies) {
  in_flight_->End();
  const bool ok = code == absl::StatusCode::kOk;
  int c = static_cast<int>(code);
  if (c < 0 || c >= kStatusCodes) c = static_cast<int>(absl::StatusCode::kUnknown);
  const int64_t stages[kStages] = {latencies.queue_us, latencies.upload_us, latencies.compute_us,
                                   latencies.download_us, latencies.total_us};
  std::array<bool, kStages> observed{};
  for (int stage = 0; stage < kStages; ++stage) observed[stage] = ok && stages[stage] >= 0;
  const Series series = SeriesFor(SeriesKey{op.label, std::move(labels.variant),
                                            std::move(labels.dtype), std::move(labels.device)},
                                  c, observed);
  series.by_code[c]->Add();
  if (!ok) return;
  for (int stage = 0; stage < kStages; ++stage) {
    if (observed[stage]) series.latency[stage]->Observe(double(stages[stage]) * 1e-6);
  }
  if (!op.compute.has_value()) return;
  if (latencies.batch_size > 0) {
    batch_size_[int(*op.compute)]->Observe(double(latencies.batch_size));
  }
  if (labels.bytes >= 0) bytes_[int(*op.compute)]->Observe(double(labels.bytes));
}

Metrics::Series Metrics::SeriesFor(SeriesKey key, int code,
                                   const std::array<bool, kStages>& stages) {
  const auto complete = [&](const Series& s) {
    if (s.by_code[code] == nullptr) return false;
    for (int stage = 0; stage < kStages; ++stage) {
      if (stages[stage] && s.latency[stage] == nullptr) return false;
    }
    return true;
  };
  // A thread serving one kind of call again finds its series here, and
  // takes no lock: even a shared one is a write to the lock's cache line,
  // which every thread serving calls would take turns on.
  thread_local LastSeries last;
  if (last.metrics == id_ && last.key == key && complete(last.series)) return last.series;
  Series found;
  bool made = false;
  {
    // Only a new combination (or a stage seen first) adds to the series:
    // readers share the lock instead of queueing.
    absl::ReaderMutexLock lock(&series_mu_);
    if (auto it = series_.find(key); it != series_.end() && complete(it->second)) {
      found = it->second;
      made = true;
    }
  }
  if (!made) {
    absl::MutexLock lock(&series_mu_);
    Series& s = series_[key];
    MakeSeries(key, s, code, stages);
    found = s;
  }
  last.metrics = id_;
  last.key = std::move(key);
  last.series = found;
  return found;
}

void Metrics::MakeSeries(const SeriesKey& key, Series& series, int code,
                         const std::array<bool, kStages>& stages) {
  const auto& [op, variant, dtype, device] = key;
  const std::string op_label(op);
  if (series.by_code[code] == nullptr) {
    series.by_code[code] =
        &requests_->Add({{"op", op_label},
                         {"variant", NoneIfEmpty(variant)},
                         {"dtype", NoneIfEmpty(dtype)},
                         {"device", NoneIfEmpty(device)},
                         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
  }
  for (int stage = 0; stage < kStages; ++stage) {
    if (!stages[stage] || series.latency[stage] != nullptr) continue;
    series.latency[stage] = &latency_->Add({{"op", op_label},
                                            {"stage", kStageNames[stage]},
                                            {"variant", NoneIfEmpty(variant)},
                                            {"dtype", NoneIfEmpty(dtype)},
                                            {"device", NoneIfEmpty(device)}},
                                           LatencyBuckets());
  }
}

void Metrics::AttachScheduler(const Scheduler* scheduler) {
  scheduler_collector_->Attach(scheduler);
}

void Metrics::AttachTensorStore(const TensorStore* store) { tensor_collector_->Attach(store); }

void Metrics::AttachSharedMemory(const SharedMemoryRegistry* regions) {
  shm_collector_->Attach(regions);
}

void Metrics::AttachGpuTelemetry(std::shared_ptr<const prometheus::Collectable> gpus) {
  gpu_collector_->Attach(std::move(gpus));
}

void Metrics::SetQueueCapacity(int64_t requests) { queue_capacity_.Set(double(requests)); }

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        const Metrics& metrics) {
  std::shared_ptr<prometheus::Collectable> collectable = metrics.collectable();
  auto http = MetricsHttpServer::Start(address, [collectable] {
    return prometheus::TextSerializer().Serialize(collectable->Collect());
  });
  if (!http.ok()) return http.status();
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint);
  endpoint->address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", (*http)->port());
  endpoint->http_ = std::move(*http);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

}  // namespace gpucompute::server
