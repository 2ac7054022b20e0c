// One metric family of this project's own series (striped counters,
// striped histograms): its series, by label set, are made on first use and
// kept (their addresses stay valid for the callers that hold them), and
// collected at each scrape, each series writing its own sample.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/ops/metric_family.h"

namespace gpucompute::server {

// `Series` has `static constexpr prometheus::MetricType kType` and
// `void Fill(prometheus::ClientMetric&) const`.
template <typename Series>
class SeriesFamily final : public prometheus::Collectable {
 public:
  using Labels = std::map<std::string, std::string>;

  SeriesFamily(std::string name, std::string help)
      : name_(std::move(name)), help_(std::move(help)) {}

  // The series of `labels`, made from `make_args` the first time.
  template <typename... MakeArgs>
  Series& Add(const Labels& labels, const MakeArgs&... make_args) {
    absl::MutexLock lock(&mu_);
    auto& series = series_[labels];
    if (series == nullptr) series = std::make_unique<Series>(make_args...);
    return *series;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    absl::MutexLock lock(&mu_);
    if (series_.empty()) return {};  // as prometheus-cpp's families: no series, no family
    prometheus::MetricFamily family = ScrapedFamily(name_, help_, Series::kType);
    for (const auto& [labels, series] : series_) {
      prometheus::ClientMetric metric;
      for (const auto& [name, value] : labels) metric.label.push_back({name, value});
      series->Fill(metric);
      family.metric.push_back(std::move(metric));
    }
    return {std::move(family)};
  }

 private:
  const std::string name_;
  const std::string help_;
  mutable absl::Mutex mu_;
  std::map<Labels, std::unique_ptr<Series>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server
