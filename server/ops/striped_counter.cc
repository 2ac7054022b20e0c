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

InFlightGauge::InFlightGauge(std::string name, std::string help)
    : name_(std::move(name)), help_(std::move(help)) {}

int64_t BegunLessEnded(const StripedCounter& begun,
                       std::initializer_list<const StripedCounter*> ended) {
  int64_t ends = 0;
  for (const StripedCounter* e : ended) ends += e->Value();
  return std::max<int64_t>(0, begun.Value() - ends);
}

std::vector<prometheus::MetricFamily> InFlightGauge::Collect() const {
  prometheus::MetricFamily family = ScrapedFamily(name_, help_, prometheus::MetricType::Gauge);
  prometheus::ClientMetric metric;
  metric.gauge.value = double(Value());
  family.metric.push_back(std::move(metric));
  return {std::move(family)};
}

}  // namespace gpucompute::server
