// Counters that every request adds to, without a shared cache line.
// prometheus-cpp's Counter adds by compare-and-swap on one double per
// series, and every call of one op and variant counts into the same series
// (and into the one in-flight gauge), so on a loaded server all of gRPC's
// threads took turns on a few cache lines per call. Here each thread adds
// into its own stripe (stripes.h), and a scrape adds them up.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/ops/series_family.h"
#include "server/ops/stripes.h"

namespace gpucompute::server {

class StripedCounter {
 public:
  StripedCounter() = default;
  StripedCounter(const StripedCounter&) = delete;
  StripedCounter& operator=(const StripedCounter&) = delete;

  // Release and acquire (free on x86): a reader that sees an Add sees all
  // that happened before it, so a count of ends read before a count of
  // beginnings never shows an end without its beginning.
  void Add(int64_t n = 1) {
    stripes_[StripeOfThisThread()].value.fetch_add(n, std::memory_order_release);
  }
  // The sum over the stripes; an Add made during the read may be missed.
  int64_t Value() const;

  // As a series of a SeriesFamily.
  static constexpr prometheus::MetricType kType = prometheus::MetricType::Counter;
  void Fill(prometheus::ClientMetric& metric) const { metric.counter.value = double(Value()); }

 private:
  struct alignas(64) Stripe {
    std::atomic<int64_t> value{0};
  };
  Stripe stripes_[kMetricStripes];
};

using CounterFamily = SeriesFamily<StripedCounter>;

// Begun less ended, never below 0. The ends are read first: an end seen is
// seen with its beginning (Add), so a thing that ends during the read still
// counts, and none counts below 0.
int64_t BegunLessEnded(const StripedCounter& begun,
                       std::initializer_list<const StripedCounter*> ended);

// Things begun and not yet ended (calls in flight), as two striped counts:
// Begin and End touch only this thread's stripes.
class StripedInFlight {
 public:
  void Begin() { begun_.Add(); }
  void End() { ended_.Add(); }
  // Begun less ended, never below 0.
  int64_t Value() const { return BegunLessEnded(begun_, {&ended_}); }

 private:
  StripedCounter begun_;
  StripedCounter ended_;
};

// The same, collected as a gauge.
class InFlightGauge final : public prometheus::Collectable {
 public:
  InFlightGauge(std::string name, std::string help);
  void Begin() { in_flight_.Begin(); }
  void End() { in_flight_.End(); }
  int64_t Value() const { return in_flight_.Value(); }
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const std::string name_;
  const std::string help_;
  StripedInFlight in_flight_;
};

}  // namespace gpucompute::server
