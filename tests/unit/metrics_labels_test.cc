// Request series by op, variant, dtype, device and code: one series per
// combination seen, latency histograms only once a combination succeeded,
// "none" for what a request never got to.
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {
namespace {

// Series per family name (a histogram counts once per label set).
std::map<std::string, size_t> SeriesCounts(const Metrics& metrics) {
  std::map<std::string, size_t> counts;
  for (const auto& f : metrics.collectable()->Collect()) counts[f.name] += f.metric.size();
  return counts;
}

StageLatencies Done() {
  StageLatencies l;
  l.queue_us = 1;
  l.upload_us = 2;
  l.compute_us = 3;
  l.download_us = 4;
  l.total_us = 10;
  l.batch_size = 1;
  return l;
}

TEST(MetricsLabels, OneSeriesPerCombinationWhateverTheLoad) {
  Metrics metrics;
  for (int i = 0; i < 1000; ++i) {
    metrics.RequestStarted();
    metrics.RequestFinished(ComputeRpcOp(kernels::Op::kMatMul),
                            {"tiled32", "float32", "cuda:0", 64 * (i + 1)}, absl::StatusCode::kOk,
                            Done());
    metrics.RequestStarted();
    metrics.RequestFinished(
        ComputeRpcOp(kernels::Op::kMatMul), {"cublas", "float64", "cuda:1", 128},
        i % 2 ? absl::StatusCode::kOk : absl::StatusCode::kResourceExhausted, Done());
  }
  auto counts = SeriesCounts(metrics);
  EXPECT_EQ(counts["gpucompute_requests_total"], 3u);  // tiled32 OK, cublas OK and exhausted
  EXPECT_EQ(counts["gpucompute_request_duration_seconds"], 2u * 5);  // 2 combinations x 5 stages
}

TEST(MetricsLabels, FailuresGetCountsButNoLatencySeries) {
  Metrics metrics;
  metrics.RequestStarted();
  metrics.RequestFinished(ComputeRpcOp(kernels::Op::kTranspose), {},
                          absl::StatusCode::kInvalidArgument, {});
  auto families = metrics.collectable()->Collect();
  bool counted = false;
  for (const auto& f : families) {
    if (f.name == "gpucompute_request_duration_seconds") {
      EXPECT_TRUE(f.metric.empty());
    }
    if (f.name != "gpucompute_requests_total") continue;
    ASSERT_EQ(f.metric.size(), 1u);
    std::map<std::string, std::string> labels;
    for (const auto& l : f.metric[0].label) labels[l.name] = l.value;
    EXPECT_EQ(labels, (std::map<std::string, std::string>{{"op", "transpose"},
                                                          {"variant", "none"},
                                                          {"dtype", "none"},
                                                          {"device", "none"},
                                                          {"code", "INVALID_ARGUMENT"}}));
    counted = true;
  }
  EXPECT_TRUE(counted);
}

// A call without a stage (GetServerInfo never queues) gets no series for
// it; a later call of the same combination that has it adds it.
TEST(MetricsLabels, AStageGetsItsSeriesWhenFirstObserved) {
  Metrics metrics;
  const RpcOp info{"server_info", std::nullopt};
  StageLatencies total_only;
  total_only.total_us = 7;
  metrics.RequestStarted();
  metrics.RequestFinished(info, {}, absl::StatusCode::kOk, total_only);
  EXPECT_EQ(SeriesCounts(metrics)["gpucompute_request_duration_seconds"], 1u);
  StageLatencies queued = total_only;
  queued.queue_us = 2;
  metrics.RequestStarted();
  metrics.RequestFinished(info, {}, absl::StatusCode::kOk, queued);
  EXPECT_EQ(SeriesCounts(metrics)["gpucompute_request_duration_seconds"], 2u);
  // Not a compute op: no batch-size or bytes observations.
  metrics.RequestStarted();
  metrics.RequestFinished(info, {"", "", "", 4096}, absl::StatusCode::kOk, Done());
  for (const auto& f : metrics.collectable()->Collect()) {
    if (f.name != "gpucompute_request_bytes" && f.name != "gpucompute_request_batch_size") continue;
    for (const auto& m : f.metric) EXPECT_EQ(m.histogram.sample_count, 0u) << f.name;
  }
}

TEST(MetricsLabels, DeviceLabelIsTheNameUpToItsFirstSpace) {
  EXPECT_EQ(DeviceLabel("cuda:3 NVIDIA H200"), "cuda:3");
  EXPECT_EQ(DeviceLabel("cpu"), "cpu");
}

}  // namespace
}  // namespace gpucompute::server
