// Samples the GPUs' own gauges (GpuTelemetry) on a thread of its own, every
// period, and hands the last readings to each Prometheus scrape: neither a
// request nor a scrape ever waits on the driver.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "server/ops/gpu_telemetry.h"

namespace gpucompute::server {

// A GPU the server uses: its label on every series ("cuda:0") and where the
// driver finds it.
struct WatchedGpu {
  std::string device;
  std::string pci_bus_id;
};

class GpuSampler final : public prometheus::Collectable {
 public:
  // `telemetry` as opened (an error says why there are no GPU gauges: the
  // library is missing, the driver refused). A zero `period` samples only
  // when SampleOnce is called (tests); otherwise a thread samples at once
  // and then every `period`.
  GpuSampler(absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry, std::vector<WatchedGpu> gpus,
             absl::Duration period);
  ~GpuSampler() override;
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Reads every watched GPU once and keeps the readings.
  void SampleOnce();
  // Why the GPU gauges are absent ("" when every GPU was read last time).
  std::string problem() const;

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Latest {
    bool read = false;  // the last Read of this GPU succeeded
    GpuReading reading;
    int64_t errors = 0;  // Reads that failed since start
  };

  void Run();

  const std::unique_ptr<GpuTelemetry> telemetry_;
  const std::string open_error_;
  const std::vector<WatchedGpu> gpus_;
  const absl::Duration period_;
  mutable absl::Mutex mu_;
  std::vector<Latest> latest_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool sampled_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpucompute::server
