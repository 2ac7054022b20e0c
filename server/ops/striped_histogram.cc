#include "server/ops/striped_histogram.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace gpucompute::server {

StripedHistogram::StripedHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      lines_per_stripe_((bounds_.size() + kCountsPerLine) / kCountsPerLine),
      counts_(std::make_unique<CountLine[]>(kMetricStripes * lines_per_stripe_)) {
  for (int stripe = 0; stripe < kMetricStripes; ++stripe) {
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      Count(stripe, i).store(0, std::memory_order_relaxed);
    }
  }
}

void StripedHistogram::Observe(double value) {
  // The first bucket whose upper bound holds the value (bounds are "le").
  const size_t bucket =
      size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  const int stripe = StripeOfThisThread();
  Count(stripe, bucket).fetch_add(1, std::memory_order_relaxed);
  Stripe& s = stripes_[stripe];
  double sum = s.sum.load(std::memory_order_relaxed);
  while (!s.sum.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

prometheus::ClientMetric::Histogram StripedHistogram::Read() const {
  prometheus::ClientMetric::Histogram h;
  std::vector<uint64_t> counts(bounds_.size() + 1, 0);
  for (int stripe = 0; stripe < kMetricStripes; ++stripe) {
    for (size_t i = 0; i < counts.size(); ++i) {
      counts[i] += Count(stripe, i).load(std::memory_order_relaxed);
    }
    h.sample_sum += stripes_[stripe].sum.load(std::memory_order_relaxed);
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound = i < bounds_.size() ? bounds_[i] : std::numeric_limits<double>::infinity();
    h.bucket.push_back(b);
  }
  h.sample_count = cumulative;
  return h;
}

}  // namespace gpucompute::server
