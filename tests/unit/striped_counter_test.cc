// The lock-free request counters read exactly as prometheus-cpp's own would
// for the same counts, in the text format scrapers parse, and lose no count
// made from many threads at once; the requests' series a thread caches are
// never another Metrics' and never miss a code counted first elsewhere.
#include "server/ops/striped_counter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {
namespace {

// Series in label order: prometheus-cpp writes them in hash order.
std::string Text(std::vector<prometheus::MetricFamily> families) {
  for (auto& f : families) {
    std::sort(f.metric.begin(), f.metric.end(),
              [](const auto& x, const auto& y) { return x.label < y.label; });
  }
  return prometheus::TextSerializer().Serialize(families);
}

TEST(StripedCounter, TheTextFormatMatchesPrometheusCpp) {
  prometheus::Registry registry;
  auto& theirs = prometheus::BuildCounter().Name("x_total").Help("h").Register(registry);
  prometheus::Counter& their_a = theirs.Add({{"op", "a"}, {"code", "OK"}});
  prometheus::Counter& their_b = theirs.Add({{"op", "b"}, {"code", "OK"}});
  CounterFamily ours("x_total", "h");
  StripedCounter& our_a = ours.Add({{"code", "OK"}, {"op", "a"}});
  StripedCounter& our_b = ours.Add({{"op", "b"}, {"code", "OK"}});
  EXPECT_EQ(&our_a, &ours.Add({{"op", "a"}, {"code", "OK"}}));
  for (int i = 0; i < 1234; ++i) {
    (i % 3 ? their_a : their_b).Increment();
    (i % 3 ? our_a : our_b).Add();
  }
  EXPECT_EQ(Text(ours.Collect()), Text(registry.Collect()));
  EXPECT_EQ(our_a.Value(), 822);
}

TEST(StripedCounter, AFamilyWithNoSeriesIsNotWritten) {
  CounterFamily ours("x_total", "h");
  EXPECT_TRUE(ours.Collect().empty());
}

TEST(StripedCounter, ManyThreadsLoseNoCount) {
  StripedCounter c;
  constexpr int kThreads = 24, kEach = 20000;  // more threads than stripes
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < kEach; ++i) c.Add();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(c.Value(), int64_t{kThreads} * kEach);
}

TEST(InFlightGauge, ReadsAsAGaugeOfBegunLessEnded) {
  prometheus::Registry registry;
  prometheus::Gauge& theirs =
      prometheus::BuildGauge().Name("x_in_flight").Help("h").Register(registry).Add({});
  InFlightGauge ours("x_in_flight", "h");
  EXPECT_EQ(ours.Value(), 0);
  // Begun on one thread, ended on another: the stripes differ, the sum not.
  for (int i = 0; i < 5; ++i) ours.Begin();
  std::thread([&ours] { ours.End(); }).join();
  theirs.Set(4);
  EXPECT_EQ(ours.Value(), 4);
  EXPECT_EQ(Text(ours.Collect()), Text(registry.Collect()));
}

// The count of gpucompute_requests_total{code=`code`} in `metrics`.
double Requests(const Metrics& metrics, const std::string& code) {
  double total = 0;
  for (const auto& f : metrics.collectable()->Collect()) {
    if (f.name != "gpucompute_requests_total") continue;
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        if (l.name == "code" && l.value == code) total += m.counter.value;
      }
    }
  }
  return total;
}

void Finish(Metrics& metrics, absl::StatusCode code, const std::string& variant = "tiled32") {
  metrics.RequestStarted();
  metrics.RequestFinished(ComputeRpcOp(kernels::Op::kMatMul), {variant, "float32", "cuda:0", 64},
                          code, {});
}

TEST(MetricsSeriesCache, AThreadsLastSeriesIsNeverAnotherMetricsOwn) {
  Metrics first;
  for (int i = 0; i < 3; ++i) Finish(first, absl::StatusCode::kOk);
  for (int round = 0; round < 3; ++round) {
    // Often made where the last one was: the cache must not take it for it.
    Metrics next;
    for (int i = 0; i < round + 1; ++i) Finish(next, absl::StatusCode::kOk);
    EXPECT_EQ(Requests(next, "OK"), round + 1);
  }
  Finish(first, absl::StatusCode::kOk);
  EXPECT_EQ(Requests(first, "OK"), 4);
}

TEST(MetricsSeriesCache, CodesAndSeriesTakenInTurnAllCount) {
  Metrics metrics;
  constexpr int kThreads = 6, kEach = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      for (int i = 0; i < kEach; ++i) {
        // A code first counted on another thread, then the same series
        // again, then another series: each misses or hits the cache.
        Finish(metrics, i % 3 == 0 ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kOk,
               (i + t) % 4 == 0 ? "cublas" : "tiled32");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Requests(metrics, "RESOURCE_EXHAUSTED"), kThreads * kEach / 3);
  EXPECT_EQ(Requests(metrics, "OK"), kThreads * kEach * 2 / 3);
  for (const auto& f : metrics.collectable()->Collect()) {
    if (f.name == "gpucompute_requests_in_flight") {
      EXPECT_EQ(f.metric.at(0).gauge.value, 0);
    }
  }
}

}  // namespace
}  // namespace gpucompute::server
