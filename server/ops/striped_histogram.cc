#include "server/ops/striped_histogram.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace gpucompute::server {

StripedHistogram::StripedHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  for (Stripe& s : stripes_) {
    s.counts = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
    for (size_t i = 0; i <= bounds_.size(); ++i) s.counts[i].store(0, std::memory_order_relaxed);
  }
}

void StripedHistogram::Observe(double value) {
  // The first bucket whose upper bound holds the value (bounds are "le").
  const size_t bucket =
      size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  Stripe& s = stripes_[StripeOfThisThread()];
  s.counts[bucket].fetch_add(1, std::memory_order_relaxed);
  double sum = s.sum.load(std::memory_order_relaxed);
  while (!s.sum.compare_exchange_weak(sum, sum + value, std::memory_order_relaxed)) {
  }
}

prometheus::ClientMetric::Histogram StripedHistogram::Read() const {
  prometheus::ClientMetric::Histogram h;
  std::vector<uint64_t> counts(bounds_.size() + 1, 0);
  for (const Stripe& s : stripes_) {
    for (size_t i = 0; i < counts.size(); ++i)
      counts[i] += s.counts[i].load(std::memory_order_relaxed);
    h.sample_sum += s.sum.load(std::memory_order_relaxed);
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
