// End to end: the Prometheus endpoint of the real server binary, scraped
// over HTTP after known traffic (counters move by exactly the requests
// sent, latency sums equal the ExecutionReports), readiness, and
// client-side round_robin over three local servers.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <map>
#include <thread>

#include "gpucompute/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/server_process.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::Connect;
using testing::FreshSeed;
using testing::RandomMatrix;
using testing::Scrape;
using testing::ScrapeMetrics;
using testing::StartServerWithMetrics;

constexpr int64_t kMaxMatrixBytes = 1 << 20;

// `settled`: once every call begun is counted (see ScrapeMetricsSettled).
Scrape MustScrape(int port, bool settled = false) {
  auto scrape = settled ? testing::ScrapeMetricsSettled(port) : ScrapeMetrics(port);
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  return scrape.ok() ? *scrape : Scrape{};
}

double Requests(const Scrape& s, const std::string& op, const std::string& variant,
                const std::string& code) {
  return s.Sum("gpucompute_requests_total", {{"op", op}, {"variant", variant}, {"code", code}});
}

double StageCount(const Scrape& s, const std::string& op, const std::string& stage) {
  return s.Sum("gpucompute_request_duration_seconds_count", {{"op", op}, {"stage", stage}});
}

double StageSum(const Scrape& s, const std::string& op, const std::string& stage) {
  return s.Sum("gpucompute_request_duration_seconds_sum", {{"op", op}, {"stage", stage}});
}

TEST(MetricsEndpoint, CountersMoveByExactlyTheRequestsSent) {
  auto server = StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH,
      {"--backend=cpu", "--max_matrix_bytes=" + std::to_string(kMaxMatrixBytes)});
  ASSERT_TRUE(server.started()) << "server did not start";
  auto stub = v1::Compute::NewStub(Connect(server.process->target()));
  const uint64_t seed = FreshSeed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));

  const Scrape before = MustScrape(server.metrics_port);

  // Known traffic: ops, variants and codes, with the reports kept.
  constexpr int kMatMuls = 7, kTransposes = 5, kReduces = 4, kBadShapes = 6, kBadVariants = 3,
                kTooLarge = 2, kInfos = 3;
  double matmul_total_s = 0, matmul_compute_s = 0, matmul_queue_s = 0;
  for (int i = 0; i < kMatMuls; ++i) {
    v1::MatMulRequest req;
    *req.mutable_a() = RandomMatrix<float>(33, 17, rng);
    *req.mutable_b() = RandomMatrix<float>(17, 29, rng);
    req.set_variant("cpu_reference");
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    ASSERT_TRUE(stub->MatMul(&ctx, req, &resp).ok());
    matmul_total_s += resp.report().total_us() * 1e-6;
    matmul_compute_s += resp.report().compute_us() * 1e-6;
    matmul_queue_s += resp.report().queue_us() * 1e-6;
  }
  std::string transpose_variant;
  for (int i = 0; i < kTransposes; ++i) {
    v1::TransposeRequest req;
    *req.mutable_input() = RandomMatrix<double>(40, 3, rng);
    grpc::ClientContext ctx;
    v1::TransposeResponse resp;
    ASSERT_TRUE(stub->Transpose(&ctx, req, &resp).ok());  // "auto"
    transpose_variant = resp.report().variant();
  }
  for (int i = 0; i < kReduces; ++i) {
    v1::ReduceRequest req;
    *req.mutable_input() = RandomMatrix<float>(10, 10, rng);
    req.set_op(v1::REDUCE_OP_MAX);
    req.set_variant("cpu_reference");
    grpc::ClientContext ctx;
    v1::ReduceResponse resp;
    ASSERT_TRUE(stub->Reduce(&ctx, req, &resp).ok());
  }
  for (int i = 0; i < kBadShapes; ++i) {  // inner dimensions differ
    v1::MatMulRequest req;
    *req.mutable_a() = RandomMatrix<float>(4, 5, rng);
    *req.mutable_b() = RandomMatrix<float>(6, 4, rng);
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    ASSERT_EQ(stub->MatMul(&ctx, req, &resp).error_code(), grpc::INVALID_ARGUMENT);
  }
  for (int i = 0; i < kBadVariants; ++i) {  // a client-chosen name never becomes a label
    v1::TransposeRequest req;
    *req.mutable_input() = RandomMatrix<float>(3, 3, rng);
    req.set_variant("no_such_variant_" + std::to_string(i));
    grpc::ClientContext ctx;
    v1::TransposeResponse resp;
    ASSERT_EQ(stub->Transpose(&ctx, req, &resp).error_code(), grpc::INVALID_ARGUMENT);
  }
  for (int i = 0; i < kTooLarge; ++i) {  // declared larger than --max_matrix_bytes
    v1::ReduceRequest req;
    req.mutable_input()->set_dtype(v1::DTYPE_FLOAT64);
    req.mutable_input()->set_rows(1024);
    req.mutable_input()->set_cols(1024);
    grpc::ClientContext ctx;
    v1::ReduceResponse resp;
    ASSERT_EQ(stub->Reduce(&ctx, req, &resp).error_code(), grpc::RESOURCE_EXHAUSTED);
  }
  for (int i = 0; i < kInfos; ++i) {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&ctx, {}, &info).ok());
  }
  {
    v1::ProfileRequest req;
    req.set_op(v1::OP_TRANSPOSE);
    req.set_dtype(v1::DTYPE_FLOAT32);
    req.set_m(64);
    req.set_n(32);
    req.set_repetitions(2);
    grpc::ClientContext ctx;
    v1::ProfileResponse resp;
    ASSERT_TRUE(stub->Profile(&ctx, req, &resp).ok());
  }
  constexpr int kSent =
      kMatMuls + kTransposes + kReduces + kBadShapes + kBadVariants + kTooLarge + kInfos + 1;

  Scrape after = MustScrape(server.metrics_port, /*settled=*/true);
  EXPECT_EQ(after.types["gpucompute_requests_total"], "counter");
  EXPECT_EQ(after.types["gpucompute_request_duration_seconds"], "histogram");
  EXPECT_EQ(after.types["gpucompute_requests_in_flight"], "gauge");
  auto delta = [&](auto f) { return f(after) - f(before); };
  EXPECT_EQ(delta([](const Scrape& s) { return s.Sum("gpucompute_requests_total"); }), kSent);
  EXPECT_EQ(delta([](const Scrape& s) { return Requests(s, "matmul", "cpu_reference", "OK"); }),
            kMatMuls);
  ASSERT_FALSE(transpose_variant.empty());
  EXPECT_EQ(
      delta([&](const Scrape& s) { return Requests(s, "transpose", transpose_variant, "OK"); }),
      kTransposes);
  EXPECT_EQ(delta([](const Scrape& s) { return Requests(s, "reduce", "cpu_reference", "OK"); }),
            kReduces);
  EXPECT_EQ(
      delta([](const Scrape& s) { return Requests(s, "matmul", "none", "INVALID_ARGUMENT"); }),
      kBadShapes);
  EXPECT_EQ(
      delta([](const Scrape& s) { return Requests(s, "transpose", "none", "INVALID_ARGUMENT"); }),
      kBadVariants);
  EXPECT_EQ(
      delta([](const Scrape& s) { return Requests(s, "reduce", "none", "RESOURCE_EXHAUSTED"); }),
      kTooLarge);
  EXPECT_EQ(delta([](const Scrape& s) { return Requests(s, "server_info", "none", "OK"); }),
            kInfos);
  EXPECT_EQ(delta([](const Scrape& s) { return Requests(s, "profile", "none", "OK"); }), 1);
  for (const testing::Sample& sample : after.samples) {
    if (sample.name == "gpucompute_requests_total") {
      EXPECT_EQ(sample.labels.at("variant").find("no_such_variant"), std::string::npos);
    }
  }

  // Latency histograms: one observation per successful request and stage;
  // the sums are the reports' microseconds (the same numbers, in seconds).
  for (const char* stage : {"queue", "upload", "compute", "download", "total"}) {
    EXPECT_EQ(delta([&](const Scrape& s) { return StageCount(s, "matmul", stage); }), kMatMuls)
        << stage;
    EXPECT_EQ(delta([&](const Scrape& s) { return StageCount(s, "transpose", stage); }),
              kTransposes)
        << stage;
  }
  EXPECT_NEAR(delta([](const Scrape& s) { return StageSum(s, "matmul", "total"); }), matmul_total_s,
              1e-9);
  EXPECT_NEAR(delta([](const Scrape& s) { return StageSum(s, "matmul", "compute"); }),
              matmul_compute_s, 1e-9);
  EXPECT_NEAR(delta([](const Scrape& s) { return StageSum(s, "matmul", "queue"); }), matmul_queue_s,
              1e-9);
  EXPECT_EQ(delta([](const Scrape& s) { return StageCount(s, "server_info", "total"); }), kInfos);
  EXPECT_EQ(delta([](const Scrape& s) { return StageCount(s, "profile", "total"); }), 1);
  for (const testing::Sample& sample : after.samples) {  // no series a request cannot have
    if (sample.name == "gpucompute_request_duration_seconds_count" &&
        sample.labels.at("op") == "server_info") {
      EXPECT_EQ(sample.labels.at("stage"), "total");
    }
  }
  // The +Inf bucket holds every observation.
  EXPECT_EQ(after.Sum("gpucompute_request_duration_seconds_bucket",
                      {{"op", "matmul"}, {"stage", "total"}, {"le", "+Inf"}}),
            StageCount(after, "matmul", "total"));

  // Nothing is left in flight or queued; the device gauges are there.
  EXPECT_EQ(after.Sum("gpucompute_requests_in_flight"), 0);
  EXPECT_EQ(after.Sum("gpucompute_requests_queued"), 0);
  // A worker counts itself idle just after it answers; allow it a moment.
  double running = after.Sum("gpucompute_requests_running");
  for (int i = 0; i < 100 && running != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    running = MustScrape(server.metrics_port).Sum("gpucompute_requests_running");
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(after.Sum("gpucompute_device_healthy", {{"device", "cpu"}}), 1);
  EXPECT_GT(after.Sum("gpucompute_device_memory_bytes", {{"device", "cpu"}}), 0);
  EXPECT_TRUE(after.Has("gpucompute_device_pool_bytes"));
  EXPECT_EQ(after.types["gpucompute_device_malloc_calls_total"], "counter");
  EXPECT_EQ(after.types["gpucompute_host_alloc_calls_total"], "counter");
  EXPECT_EQ(after.types["gpucompute_device_pool_growths_total"], "counter");
  // The CPU backend captures no CUDA graphs: both kinds of work read 0.
  for (const char* family :
       {"gpucompute_cuda_graph_captures_total", "gpucompute_cuda_graph_replays_total"}) {
    EXPECT_EQ(after.types[family], "counter") << family;
    for (const char* work : {"request", "batch"}) {
      const std::map<std::string, std::string> labels = {{"device", "cpu"}, {"work", work}};
      const bool present = std::any_of(after.samples.begin(), after.samples.end(),
                                       [&](const testing::Sample& sample) {
                                         return sample.name == family && sample.labels == labels;
                                       });
      EXPECT_TRUE(present) << family << " " << work;
      EXPECT_EQ(after.Sum(family, labels), 0) << family << " " << work;
    }
  }
  EXPECT_EQ(server.process->Stop(SIGTERM), 0);
}

TEST(MetricsEndpoint, InFlightAndQueuedWhileBusy) {
  auto server = StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--cpu_workers=1", "--max_queue_depth=64"});
  ASSERT_TRUE(server.started());
  std::mt19937_64 rng(FreshSeed());
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(400, 400, rng);
  *req.mutable_b() = RandomMatrix<float>(400, 400, rng);
  req.set_variant("cpu_reference");
  auto stub = v1::Compute::NewStub(Connect(server.process->target()));
  constexpr int kCalls = 8;
  std::vector<std::future<bool>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      grpc::ClientContext ctx;
      v1::MatMulResponse resp;
      return stub->MatMul(&ctx, req, &resp).ok();
    }));
  }
  auto all_answered = [&] {
    for (auto& f : calls) {
      if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    }
    return true;
  };
  // One worker: while the calls run, one runs and the others queue.
  double max_in_flight = 0, max_queued = 0;
  while ((max_queued == 0 || max_in_flight < 2) && !all_answered()) {
    auto scrape = ScrapeMetrics(server.metrics_port);
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    max_in_flight = std::max(max_in_flight, scrape->Sum("gpucompute_requests_in_flight"));
    max_queued = std::max(max_queued, scrape->Sum("gpucompute_requests_queued"));
    EXPECT_LE(scrape->Sum("gpucompute_requests_running"), 1);
  }
  for (auto& f : calls) EXPECT_TRUE(f.get());
  EXPECT_GT(max_in_flight, 1);
  EXPECT_GT(max_queued, 0);
  const Scrape after = MustScrape(server.metrics_port, /*settled=*/true);
  EXPECT_EQ(after.Sum("gpucompute_requests_in_flight"), 0);
  EXPECT_EQ(Requests(after, "matmul", "cpu_reference", "OK"), kCalls);
}

TEST(MetricsEndpoint, EmptyAddressTurnsItOff) {
  testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--metrics_listen="});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub->GetServerInfo(&ctx, {}, &info).ok());
}

TEST(MetricsEndpoint, AnAddressInUseStopsTheServer) {
  auto first = StartServerWithMetrics(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu"});
  ASSERT_TRUE(first.started());
  testing::ServerProcess second(
      GPUCOMPUTE_SERVER_PATH,
      {"--backend=cpu", "--metrics_listen=127.0.0.1:" + std::to_string(first.metrics_port)});
  EXPECT_FALSE(second.started()) << "a second server bound the same metrics port";
}

// Health is NOT_SERVING from the moment the port opens until the devices
// are ready, and never goes back before a stop; Compute calls meanwhile get
// UNAVAILABLE rather than hanging.
TEST(Readiness, NotServingUntilDevicesAreOpen) {
  const int port = testing::FreeLoopbackPort();
  const std::string target = "127.0.0.1:" + std::to_string(port);
  std::atomic<bool> started{false};
  // Later flags win: this --listen replaces ServerProcess's port 0. The
  // server measures its ceilings (--ceilings= names no file): the window in
  // which it listens but is not serving yet.
  auto server = std::async(std::launch::async, [&] {
    auto s = std::make_unique<testing::ServerProcess>(
        GPUCOMPUTE_SERVER_PATH, std::vector<std::string>{"--backend=cpu", "--metrics_listen=",
                                                         "--listen=" + target, "--ceilings="});
    started = true;
    return s;
  });
  // Retry connecting every few milliseconds (gRPC's default backoff starts
  // at a second, longer than the whole start-up on the CPU backend).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 20);
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto health = Health::NewStub(channel);
  auto compute = v1::Compute::NewStub(channel);
  std::vector<HealthCheckResponse::ServingStatus> seen;
  bool compute_refused = false;
  while (!started) {
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(true);  // wait for the port to open
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    HealthCheckRequest req;
    HealthCheckResponse resp;
    if (!health->Check(&ctx, req, &resp).ok()) continue;
    if (seen.empty() || seen.back() != resp.status()) seen.push_back(resp.status());
    if (resp.status() == HealthCheckResponse::NOT_SERVING && !compute_refused) {
      grpc::ClientContext info_ctx;
      v1::ServerInfo info;
      const grpc::Status s = compute->GetServerInfo(&info_ctx, {}, &info);
      // It may have become ready in between.
      compute_refused = s.error_code() == grpc::UNAVAILABLE;
      if (!s.ok()) {
        EXPECT_EQ(s.error_code(), grpc::UNAVAILABLE) << s.error_message();
      }
    }
  }
  auto process = server.get();
  ASSERT_TRUE(process->started());
  grpc::ClientContext ctx;
  // The channel may be between reconnect attempts when the loop ends.
  ctx.set_wait_for_ready(true);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  HealthCheckRequest req;
  HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  if (seen.empty()) {
    GTEST_SKIP() << "the server became ready before the first health check got through";
  }
  EXPECT_EQ(seen.front(), HealthCheckResponse::NOT_SERVING);
  EXPECT_LE(seen.size(), 2u) << "health went back to NOT_SERVING during start-up";
  EXPECT_EQ(process->Stop(SIGTERM), 0);
}

// Client-side balancing: one channel over three servers with round_robin
// spreads requests over all of them; each server's metrics count its share.
TEST(RoundRobin, SpreadsRequestsOverThreeServers) {
  std::vector<testing::ServerWithMetrics> servers;
  std::string target = "ipv4:";
  for (int i = 0; i < 3; ++i) {
    servers.push_back(StartServerWithMetrics(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu"}));
    ASSERT_TRUE(servers.back().started()) << "server " << i;
    target += (i ? "," : "") + servers.back().process->target();
  }
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(R"({"loadBalancingConfig":[{"round_robin":{}}]})");
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(
      channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  auto stub = v1::Compute::NewStub(channel);
  std::mt19937_64 rng(FreshSeed());
  int sent = 0;
  auto send = [&](int count) {
    for (int i = 0; i < count; ++i, ++sent) {
      v1::TransposeRequest req;
      *req.mutable_input() = RandomMatrix<float>(8, 5, rng);
      grpc::ClientContext ctx;
      v1::TransposeResponse resp;
      ASSERT_TRUE(stub->Transpose(&ctx, req, &resp).ok());
    }
  };
  auto served = [&] {
    std::vector<double> counts;
    for (const auto& server : servers) {
      counts.push_back(MustScrape(server.metrics_port, /*settled=*/true)
                           .Sum("gpucompute_requests_total", {{"op", "transpose"}}));
    }
    return counts;
  };
  // round_robin uses the connections that are ready; on a busy machine one
  // may connect late, so send until every server has answered some.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<double> counts;
  do {
    send(15);
    counts = served();
  } while (std::count(counts.begin(), counts.end(), 0.0) > 0 &&
           std::chrono::steady_clock::now() < give_up);
  double total = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    EXPECT_GT(counts[i], 0) << "server " << i << " (" << servers[i].process->target()
                            << ") served nothing";
    total += counts[i];
  }
  EXPECT_EQ(total, sent);

  // With all three connected, the next requests go round in turn.
  send(30);
  const std::vector<double> after = served();
  for (size_t i = 0; i < servers.size(); ++i) {
    EXPECT_NEAR(after[i] - counts[i], 10, 5) << "server " << i;
  }
}

}  // namespace
}  // namespace gpucompute
