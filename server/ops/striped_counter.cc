#include "server/ops/striped_counter.h"

#include <algorithm>
#include <utility>

#include "server/ops/metric_family.h"

namespace gpucompute::server {

int64_t StripedCounter::Value() const {
  int64_t sum = 0;
  for (const Stripe& s : stripes_) sum += s.value.load(std::memory_order_acquire);
  return sum;
}

CounterFamily::CounterFamily(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

StripedCounter& CounterFamily::Add(const std::map<std::string, std::string>& labels) {
  absl::MutexLock lock(&mu_);
  auto& series = series_[labels];
  if (series == nullptr) series = std::make_unique<StripedCounter>();
  return *series;
}

std::vector<prometheus::MetricFamily> CounterFamily::Collect() const {
  absl::MutexLock lock(&mu_);
  if (series_.empty()) return {};  // as prometheus-cpp's families: no series, no family
  prometheus::MetricFamily family = ScrapedFamily(name_, help_, prometheus::MetricType::Counter);
  for (const auto& [labels, series] : series_) {
    prometheus::ClientMetric metric;
    for (const auto& [name, value] : labels) metric.label.push_back({name, value});
    metric.counter.value = double(series->Value());
    family.metric.push_back(std::move(metric));
  }
  return {std::move(family)};
}

InFlightGauge::InFlightGauge(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

int64_t StripedInFlight::Value() const {
  // Ended first: an end seen is seen with its beginning (StripedCounter).
  const int64_t ended = ended_.Value();
  const int64_t begun = begun_.Value();
  return std::max<int64_t>(0, begun - ended);
}

std::vector<prometheus::MetricFamily> InFlightGauge::Collect() const {
  prometheus::MetricFamily family = ScrapedFamily(name_, help_, prometheus::MetricType::Gauge);
  prometheus::ClientMetric metric;
  metric.gauge.value = double(Value());
  family.metric.push_back(std::move(metric));
  return {std::move(family)};
}

}  // namespace gpucompute::server
