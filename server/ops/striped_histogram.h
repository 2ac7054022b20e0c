// Histograms that every request observes, without a lock. prometheus-cpp's
// Histogram takes a mutex on each Observe; the request histograms are shared
// by all the calls of one op and variant, so on a loaded server every call
// queued on the same few mutexes (seven per compute call). Here each thread
// counts into its own stripe of atomics (stripes.h), and a scrape adds the
// stripes up.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "server/ops/series_family.h"
#include "server/ops/stripes.h"

namespace gpucompute::server {

class StripedHistogram {
 public:
  // `bounds`: the buckets' upper bounds, ascending; a +Inf bucket follows.
  explicit StripedHistogram(std::vector<double> bounds);
  StripedHistogram(const StripedHistogram&) = delete;
  StripedHistogram& operator=(const StripedHistogram&) = delete;

  void Observe(double value);
  // The histogram as the text format writes it: cumulative buckets, the
  // count (the +Inf bucket's) and the sum. An observation made during the
  // read may be in the buckets and not yet in the sum.
  prometheus::ClientMetric::Histogram Read() const;

  // As a series of a SeriesFamily.
  static constexpr prometheus::MetricType kType = prometheus::MetricType::Histogram;
  void Fill(prometheus::ClientMetric& metric) const { metric.histogram = Read(); }

 private:
  // A stripe's bucket counts fill whole cache lines of their own: each
  // stripe's counts held in an allocation of its own shared the lines at
  // its ends with its neighbours'.
  static constexpr size_t kCountsPerLine = 8;
  struct alignas(64) CountLine {
    std::atomic<uint64_t> count[kCountsPerLine];
  };
  static_assert(sizeof(CountLine) == 64);
  struct alignas(64) Stripe {
    std::atomic<double> sum{0};
  };
  // Bucket `bucket`'s count in stripe `stripe` (+Inf is the last bucket).
  std::atomic<uint64_t>& Count(int stripe, size_t bucket) const {
    return counts_[size_t(stripe) * lines_per_stripe_ + bucket / kCountsPerLine]
        .count[bucket % kCountsPerLine];
  }

  const std::vector<double> bounds_;
  const size_t lines_per_stripe_;
  const std::unique_ptr<CountLine[]> counts_;  // kMetricStripes * lines_per_stripe_
  Stripe stripes_[kMetricStripes];
};

using HistogramFamily = SeriesFamily<StripedHistogram>;

}  // namespace gpucompute::server
