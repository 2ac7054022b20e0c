// The lock-free request histograms read exactly as prometheus-cpp's own
// would for the same observations, in the text format scrapers parse, and
// lose no observation made from many threads at once.
#include "server/ops/striped_histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace gpucompute::server {
namespace {

const std::vector<double> kBounds = {1e-5, 1e-4, 1e-3, 0.01, 0.1, 1};

// More buckets than one cache line of counts holds (8), as the latency
// histograms have.
std::vector<double> ManyBounds() {
  std::vector<double> bounds;
  for (double b = 1e-6; b < 10; b *= 2) bounds.push_back(b);
  return bounds;
}

void ExpectTheTextFormatOfPrometheusCpp(const std::vector<double>& bounds) {
  prometheus::Registry registry;
  auto& theirs = prometheus::BuildHistogram().Name("x_seconds").Help("h").Register(registry);
  prometheus::Histogram& their_a = theirs.Add({{"op", "a"}, {"stage", "total"}}, bounds);
  prometheus::Histogram& their_b = theirs.Add({{"op", "b"}, {"stage", "total"}}, bounds);
  HistogramFamily ours("x_seconds", "h");
  StripedHistogram& our_a = ours.Add({{"stage", "total"}, {"op", "a"}}, bounds);
  StripedHistogram& our_b = ours.Add({{"op", "b"}, {"stage", "total"}}, bounds);
  EXPECT_EQ(&our_a, &ours.Add({{"op", "a"}, {"stage", "total"}}, bounds));

  // Values on the bounds themselves too: a bucket holds its upper bound.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> log10(-6, 1);
  std::vector<double> values = {1e-5, 1e-3, 1, 2, 0};
  for (int i = 0; i < 200; ++i) values.push_back(std::pow(10.0, log10(rng)));
  for (size_t i = 0; i < values.size(); ++i) {
    (i % 3 ? their_a : their_b).Observe(values[i]);
    (i % 3 ? our_a : our_b).Observe(values[i]);
  }
  // Series in label order: prometheus-cpp writes them in hash order.
  auto sorted = [](std::vector<prometheus::MetricFamily> families) {
    for (auto& f : families) {
      std::sort(f.metric.begin(), f.metric.end(),
                [](const auto& x, const auto& y) { return x.label < y.label; });
    }
    return families;
  };
  const prometheus::TextSerializer text;
  EXPECT_EQ(text.Serialize(sorted(ours.Collect())), text.Serialize(sorted(registry.Collect())));
}

TEST(StripedHistogram, TheTextFormatMatchesPrometheusCpp) {
  ExpectTheTextFormatOfPrometheusCpp(kBounds);
}

TEST(StripedHistogram, TheTextFormatMatchesPrometheusCppPastOneLineOfBuckets) {
  ASSERT_GT(ManyBounds().size(), 16u);
  ExpectTheTextFormatOfPrometheusCpp(ManyBounds());
}

TEST(StripedHistogram, AFamilyWithNoSeriesIsNotWritten) {
  HistogramFamily ours("x_seconds", "h");
  EXPECT_TRUE(ours.Collect().empty());
}

TEST(StripedHistogram, ManyThreadsLoseNoObservation) {
  StripedHistogram h(kBounds);
  constexpr int kThreads = 24, kEach = 20000;  // more threads than stripes
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Observe(t % 2 ? 5e-4 : 0.5);
    });
  }
  for (std::thread& t : threads) t.join();
  const prometheus::ClientMetric::Histogram read = h.Read();
  EXPECT_EQ(read.sample_count, uint64_t(kThreads) * kEach);
  ASSERT_EQ(read.bucket.size(), kBounds.size() + 1);
  EXPECT_EQ(read.bucket[2].cumulative_count, uint64_t(kThreads / 2) * kEach);  // le 1e-3
  EXPECT_EQ(read.bucket.back().cumulative_count, read.sample_count);
  EXPECT_NEAR(read.sample_sum, (kThreads / 2) * kEach * (5e-4 + 0.5), 1e-6);
}

}  // namespace
}  // namespace gpucompute::server
