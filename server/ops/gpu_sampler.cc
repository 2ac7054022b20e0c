#include "server/ops/gpu_sampler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpucompute/common/thread_name.h"
#include "prometheus/metric_family.h"
#include "server/ops/log.h"
#include "server/ops/metric_family.h"
#include "server/ops/nvml_abi.h"

namespace gpucompute::server {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// NVML's throttle reasons as label values, in bit order.
constexpr std::pair<unsigned long long, const char*> kThrottleReasons[] = {
    {nvml::nvmlClocksThrottleReasonGpuIdle, "gpu_idle"},
    {nvml::nvmlClocksThrottleReasonApplicationsClocksSetting, "applications_clocks"},
    {nvml::nvmlClocksThrottleReasonSwPowerCap, "sw_power_cap"},
    {nvml::nvmlClocksThrottleReasonHwSlowdown, "hw_slowdown"},
    {nvml::nvmlClocksThrottleReasonSyncBoost, "sync_boost"},
    {nvml::nvmlClocksThrottleReasonSwThermalSlowdown, "sw_thermal"},
    {nvml::nvmlClocksThrottleReasonHwThermalSlowdown, "hw_thermal"},
    {nvml::nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake"},
    {nvml::nvmlClocksThrottleReasonDisplayClockSetting, "display_clocks"},
};

void Add(MetricFamily& family, double value, std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family.metric.push_back(std::move(m));
}

}  // namespace

GpuSampler::GpuSampler(absl::StatusOr<std::unique_ptr<GpuTelemetry>> telemetry,
                       std::vector<WatchedGpu> gpus, absl::Duration period)
    : telemetry_(telemetry.ok() ? std::move(*telemetry) : nullptr),
      open_error_(telemetry.ok() ? "" : std::string(telemetry.status().message())),
      gpus_(std::move(gpus)),
      period_(period),
      latest_(gpus_.size()) {
  if (telemetry_ != nullptr && !gpus_.empty() && period_ > absl::ZeroDuration()) {
    thread_ = std::thread([this] { Run(); });
  }
}

GpuSampler::~GpuSampler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void GpuSampler::Run() {
  common::NameThisThread("gpu-sampler");
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    mu_.Unlock();
    SampleOnce();
    mu_.Lock();
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), period_);
  }
}

void GpuSampler::SampleOnce() {
  if (telemetry_ == nullptr) return;
  // Read without the lock: a scrape meanwhile serves the previous readings.
  std::vector<absl::StatusOr<GpuReading>> readings;
  readings.reserve(gpus_.size());
  for (const WatchedGpu& gpu : gpus_) readings.push_back(telemetry_->Read(gpu.pci_bus_id));
  absl::MutexLock lock(&mu_);
  last_error_.clear();
  for (size_t i = 0; i < gpus_.size(); ++i) {
    Latest& latest = latest_[i];
    // Said once when a GPU's gauges go away or come back, not every period.
    if (readings[i].ok() && !latest.read && sampled_) {
      LogInfo(absl::StrCat("GPU gauges: ", gpus_[i].device, " read again"));
    } else if (!readings[i].ok() && (latest.read || !sampled_)) {
      LogWarning(absl::StrCat("GPU gauges: ", gpus_[i].device, " not read (",
                              readings[i].status().message(), "); its gauges are absent"));
    }
    latest.read = readings[i].ok();
    if (latest.read) {
      latest.reading = *readings[i];
      continue;
    }
    ++latest.errors;
    latest.reading = {};
    if (last_error_.empty()) {
      last_error_ = absl::StrCat(gpus_[i].device, ": ", readings[i].status().message());
    }
  }
  sampled_ = true;
}

std::string GpuSampler::problem() const {
  if (telemetry_ == nullptr) return open_error_;
  if (gpus_.empty()) return "no GPU in use";
  absl::MutexLock lock(&mu_);
  if (!sampled_) return "not sampled yet";
  return last_error_;
}

std::vector<MetricFamily> GpuSampler::Collect() const {
  auto up =
      ScrapedFamily("gpucompute_gpu_telemetry_up",
                    "1 when the last sampling read every GPU through NVML; 0 when GPU gauges are "
                    "absent (no GPU in use, no NVML library, or a read failed: the log says why).",
                    MetricType::Gauge);
  const bool all_read = problem().empty();
  Add(up, all_read ? 1 : 0, {});
  std::vector<MetricFamily> out;
  out.push_back(std::move(up));
  if (telemetry_ == nullptr || gpus_.empty()) return out;

  auto errors = ScrapedFamily(
      "gpucompute_gpu_telemetry_errors_total",
      "Samplings in which a GPU could not be read (its gauges were absent until the next).",
      MetricType::Counter);
  auto util =
      ScrapedFamily("gpucompute_gpu_utilization_ratio",
                    "Fraction of the driver's last sample period in which a kernel ran (NVML; "
                    "nvidia-smi's utilization.gpu / 100).",
                    MetricType::Gauge);
  auto mem_util =
      ScrapedFamily("gpucompute_gpu_memory_utilization_ratio",
                    "Fraction of the last sample period in which device memory was read or "
                    "written.",
                    MetricType::Gauge);
  auto mem_total = ScrapedFamily("gpucompute_gpu_memory_total_bytes", "Device memory, total.",
                                 MetricType::Gauge);
  auto mem_used =
      ScrapedFamily("gpucompute_gpu_memory_used_bytes",
                    "Device memory in use by every process and the driver.", MetricType::Gauge);
  auto mem_own =
      ScrapedFamily("gpucompute_gpu_memory_used_by_server_bytes",
                    "Device memory this server process holds (absent when the driver does not "
                    "list it, e.g. in a container without the host's pid namespace).",
                    MetricType::Gauge);
  auto power = ScrapedFamily("gpucompute_gpu_power_watts", "Power draw.", MetricType::Gauge);
  auto power_limit =
      ScrapedFamily("gpucompute_gpu_power_limit_watts", "Enforced power limit.", MetricType::Gauge);
  auto temperature = ScrapedFamily("gpucompute_gpu_temperature_celsius", "GPU core temperature.",
                                   MetricType::Gauge);
  auto clock = ScrapedFamily("gpucompute_gpu_sm_clock_hertz", "SM clock now.", MetricType::Gauge);
  auto throttled =
      ScrapedFamily("gpucompute_gpu_throttled",
                    "1 while NVML reports this clock throttle reason active.", MetricType::Gauge);
  auto pcie =
      ScrapedFamily("gpucompute_gpu_pcie_bytes_per_second",
                    "PCIe traffic over NVML's 20 ms window, direction tx (from the GPU) or rx.",
                    MetricType::Gauge);
  auto nvlink =
      ScrapedFamily("gpucompute_gpu_nvlink_bytes_total",
                    "NVLink data bytes since the driver loaded, all links, direction tx or rx.",
                    MetricType::Counter);

  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    const std::string& device = gpus_[i].device;
    const Latest& latest = latest_[i];
    Add(errors, double(latest.errors), {{"device", device}});
    if (!latest.read) continue;
    const GpuReading& r = latest.reading;
    auto gauge = [&](MetricFamily& family, const auto& value) {
      if (value) Add(family, double(*value), {{"device", device}});
    };
    gauge(util, r.utilization);
    gauge(mem_util, r.memory_utilization);
    gauge(mem_total, r.memory_total_bytes);
    gauge(mem_used, r.memory_used_bytes);
    gauge(mem_own, r.memory_used_by_server_bytes);
    gauge(power, r.power_watts);
    gauge(power_limit, r.power_limit_watts);
    gauge(temperature, r.temperature_celsius);
    gauge(clock, r.sm_clock_hertz);
    if (r.throttle_reasons) {
      for (const auto& [bit, reason] : kThrottleReasons) {
        Add(throttled, (*r.throttle_reasons & bit) ? 1 : 0,
            {{"device", device}, {"reason", reason}});
      }
    }
    for (auto [value, direction] : {std::pair{r.pcie_tx_bytes_per_second, "tx"},
                                    std::pair{r.pcie_rx_bytes_per_second, "rx"}}) {
      if (value) Add(pcie, *value, {{"device", device}, {"direction", direction}});
    }
    for (auto [value, direction] :
         {std::pair{r.nvlink_tx_bytes, "tx"}, std::pair{r.nvlink_rx_bytes, "rx"}}) {
      if (value) Add(nvlink, double(*value), {{"device", device}, {"direction", direction}});
    }
  }
  for (MetricFamily* f : {&errors, &util, &mem_util, &mem_total, &mem_used, &mem_own, &power,
                          &power_limit, &temperature, &clock, &throttled, &pcie, &nvlink}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace gpucompute::server
