// End to end on the CUDA backend: the real server on loopback, every variant
// by name, 64 concurrent clients, pooled memory flat in steady state, an
// over-size request refused while others succeed, cancellation returning
// memory, and work on every GPU. Tensors: upload, every variant on tensors
// with and without keep (no upload / download in the report), a kept chain,
// tensor memory out of the device budget, a 3 GiB round trip, and a tensor
// on another GPU copied peer to peer. Skips with a message when no GPU
// exists.
#include <cuda_runtime.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>
#include <thread>

#include "gpucompute/kernels/reference.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/op_requests.h"
#include "support/server_process.h"
#include "support/tensor_client.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::FreshSeed;
using testing::MaxError;
using testing::ProblemOf;
using testing::RandomMatrix;
using testing::ServerProcess;

int GpuCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define SKIP_WITHOUT_GPU() \
  if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"

v1::ServerInfo Info(v1::Compute::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub.GetServerInfo(&ctx, {}, &info).ok());
  return info;
}

kernels::Op KernelOp(v1::Op op) {
  return op == v1::OP_MATMUL      ? kernels::Op::kMatMul
         : op == v1::OP_TRANSPOSE ? kernels::Op::kTranspose
                                  : kernels::Op::kReduce;
}

// One request of `op` on `variant`: `a` (and `b`, for a MatMul) as given,
// inline bytes or tensor references; a Reduce sums per column. With
// `keep`, the result stays on the server as a new tensor.
testing::OpAnswer SendOp(v1::Compute::Stub& stub, v1::Op op, const v1::Matrix& a,
                         const v1::Matrix& b, const std::string& variant, bool keep = false) {
  testing::OpRequest r;
  r.op = KernelOp(op);
  r.a = a;
  r.b = b;
  r.axis = v1::REDUCE_AXIS_PER_COLUMN;
  r.variant = variant;
  r.keep = keep;
  grpc::ClientContext ctx;
  return testing::SendOp(stub, r, ctx);
}

// Whether the server says it ran the request by replaying a CUDA graph.
bool ReplayedFromGraph(const v1::ExecutionReport& report) {
  return report.device().find("replayed from a CUDA graph") != std::string::npos;
}

// Whether the request ran inside a batch's graph (counted as work="batch"),
// not alone or as one of a batch the device ran member by member.
bool RanInABatchGraph(const v1::ExecutionReport& report) {
  return report.device().find("the batch replayed from a CUDA graph") != std::string::npos;
}

// The CPU reference for SendOp's request on these bytes.
std::vector<double> ReferenceOf(v1::Op op, const v1::Matrix& a, const v1::Matrix& b) {
  if (op == v1::OP_MATMUL) {
    return kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, a, &b), a.data().data(),
                                    b.data().data());
  }
  kernels::Problem p = ProblemOf(KernelOp(op), a, nullptr);
  p.reduce_axis = kernels::ReduceAxis::kPerColumn;
  return kernels::ReferenceResult(p, a.data().data(), nullptr);
}

class GpuServerTest : public testing::SeededStubTest {
 protected:
  static void SetUpTestSuite() {
    if (GpuCount() == 0) return;
    testing::ServerWithMetrics started =
        testing::StartServerWithMetrics(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=0"});
    server_ = started.process.release();
    metrics_port_ = started.metrics_port;
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0);
    }
    delete server_;
    server_ = nullptr;
  }
  // The server's request graphs, captured plus replayed, from /metrics.
  static double RequestGraphLaunches() {
    auto scrape = testing::ScrapeMetricsSettled(metrics_port_);
    EXPECT_TRUE(scrape.ok()) << scrape.status();
    if (!scrape.ok()) return -1;
    return scrape->Sum("gpucompute_cuda_graph_captures_total", {{"work", "request"}}) +
           scrape->Sum("gpucompute_cuda_graph_replays_total", {{"work", "request"}});
  }
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_TRUE(server_ && server_->started()) << "server did not start on the GPU";
    ConnectTo(server_->target());
  }

  static ServerProcess* server_;
  static int metrics_port_;
};
ServerProcess* GpuServerTest::server_ = nullptr;
int GpuServerTest::metrics_port_ = 0;

TEST_F(GpuServerTest, ServerInfoDescribesTheGpu) {
  const v1::ServerInfo info = Info(*stub_);
  EXPECT_EQ(info.backend(), "cuda");
  ASSERT_GE(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).name().rfind("cuda:0 ", 0), 0u) << info.devices(0).name();
  EXPECT_GT(info.devices(0).multiprocessors(), 0);
  EXPECT_TRUE(info.devices(0).healthy());
  EXPECT_GT(info.devices(0).peak_gbytes_per_s(), 100);
  EXPECT_GT(info.devices(0).peak_gflops_fp32(), 1000);
  std::set<std::string> matmul;
  for (const auto& v : info.variants()) {
    if (v.op() == v1::OP_MATMUL) matmul.insert(v.name());
  }
  for (const char* name : {"naive", "tiled16", "tiled32", "tiled32_padded", "register_tiled",
                           "cublas", "cublas_tf32"}) {
    EXPECT_TRUE(matmul.count(name)) << name;
  }
}

// Every registered variant by name, both dtypes where supported, odd shapes:
// small ones (the slot's scratch path) and ones past 1 MiB (the pool path).
TEST_F(GpuServerTest, EveryVariantByNameIsCorrect) {
  const v1::ServerInfo info = Info(*stub_);
  // Tiny requests (under --zero_copy_bytes, 64 KiB by default) run the
  // project's kernels on pinned host memory; small ones copy through the
  // slot's scratch; large ones take buffers from the pool.
  for (const char* size : {"tiny", "small", "large"}) {
    const bool large = size[0] == 'l', tiny = size[0] == 't';
    // MatMul m x k times k x n; Transpose and Reduce rows x cols.
    const int64_t m = large  ? 601
                      : tiny ? 17
                             : 131,
                  k = large  ? 257
                      : tiny ? 33
                             : 67,
                  n = large  ? 533
                      : tiny ? 9
                             : 95;
    const int64_t rows = large ? 1031 : tiny ? 19 : 257, cols = large ? 301 : tiny ? 35 : 33;
    const int64_t reduce_rows = large  ? 1031
                                : tiny ? 23
                                       : 301,
                  reduce_cols = large  ? 303
                                : tiny ? 37
                                       : 77;
    for (const auto& v : info.variants()) {
      for (int dtype : v.dtypes()) {
        // 16-bit requests are not built here (tests/gpu/half_matmul_test.cc
        // checks the kernels).
        if (dtype != v1::DTYPE_FLOAT32 && dtype != v1::DTYPE_FLOAT64) continue;
        const bool f64 = dtype == v1::DTYPE_FLOAT64;
        const double tol = v.reduced_precision() ? 5e-3 : f64 ? 1e-12 : 1e-4;
        SCOPED_TRACE(v.name() + (f64 ? " float64 " : " float32 ") + size + " " + SeedNote());
        grpc::ClientContext ctx;
        if (v.op() == v1::OP_MATMUL) {
          v1::MatMulRequest req;
          *req.mutable_a() =
              f64 ? RandomMatrix<double>(m, k, rng_) : RandomMatrix<float>(m, k, rng_);
          *req.mutable_b() =
              f64 ? RandomMatrix<double>(k, n, rng_) : RandomMatrix<float>(k, n, rng_);
          req.set_variant(v.name());
          v1::MatMulResponse resp;
          const grpc::Status s = stub_->MatMul(&ctx, req, &resp);
          ASSERT_TRUE(s.ok()) << s.error_message();
          EXPECT_EQ(resp.report().variant(), v.name());
          EXPECT_LE(MaxError(resp.c(), kernels::ReferenceResult(
                                           ProblemOf(kernels::Op::kMatMul, req.a(), &req.b()),
                                           req.a().data().data(), req.b().data().data())),
                    tol);
        } else if (v.op() == v1::OP_TRANSPOSE) {
          v1::TransposeRequest req;
          *req.mutable_input() =
              f64 ? RandomMatrix<double>(rows, cols, rng_) : RandomMatrix<float>(rows, cols, rng_);
          req.set_variant(v.name());
          v1::TransposeResponse resp;
          const grpc::Status s = stub_->Transpose(&ctx, req, &resp);
          ASSERT_TRUE(s.ok()) << s.error_message();
          EXPECT_EQ(
              MaxError(resp.output(), kernels::ReferenceResult(
                                          ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
                                          req.input().data().data(), nullptr)),
              0.0);
        } else {
          const v1::Matrix input = f64 ? RandomMatrix<double>(reduce_rows, reduce_cols, rng_)
                                       : RandomMatrix<float>(reduce_rows, reduce_cols, rng_);
          for (int axis = 0; axis < 3; ++axis) {
            grpc::ClientContext rctx;
            v1::ReduceRequest req;
            *req.mutable_input() = input;
            req.set_op(v1::REDUCE_OP_SUM);
            req.set_axis(static_cast<v1::ReduceAxis>(axis));
            req.set_variant(v.name());
            v1::ReduceResponse resp;
            const grpc::Status s = stub_->Reduce(&rctx, req, &resp);
            ASSERT_TRUE(s.ok()) << s.error_message();
            kernels::Problem p = ProblemOf(kernels::Op::kReduce, input, nullptr);
            p.reduce_axis = static_cast<kernels::ReduceAxis>(axis);
            // Sum errors scale with the number of terms (contract: 1e-5 * sum|x|).
            EXPECT_LE(
                MaxError(resp.output(), kernels::ReferenceResult(p, input.data().data(), nullptr)),
                (f64 ? 1e-12 : 1e-5) * double(reduce_rows * reduce_cols))
                << "axis " << axis;
          }
        }
      }
    }
  }
}

// A tiny Transpose through one of the project's kernels runs zero-copy and
// its report says so (after the device name), with no upload or download
// stage; cuBLAS copies.
TEST_F(GpuServerTest, TinyRequestsRunZeroCopyOnlyThroughPlainKernels) {
  for (const std::string variant : {"shared_padded", "cublas"}) {
    grpc::ClientContext ctx;
    v1::TransposeRequest req;
    *req.mutable_input() = RandomMatrix<float>(7, 5, rng_);
    req.set_variant(variant);
    v1::TransposeResponse resp;
    const grpc::Status s = stub_->Transpose(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(MaxError(resp.output(), kernels::ReferenceResult(
                                          ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
                                          req.input().data().data(), nullptr)),
              0.0)
        << variant;
    const bool zero_copy = resp.report().device().find("zero-copy") != std::string::npos;
    EXPECT_EQ(zero_copy, variant != "cublas") << variant << ": " << resp.report().device();
    if (zero_copy) {
      EXPECT_EQ(resp.report().upload_us(), 0);
      EXPECT_EQ(resp.report().download_us(), 0);
    }
  }
}

// A small request seen again on its stream runs from a CUDA graph of its
// copies, kernels and timing marks (--request_graphs_per_stream): every
// float32 variant, tiny (zero-copy) and small (through the scratch), sent
// eight times with the same bytes. Every answer equals the first bit for
// bit and the reference within tolerance, each report has its kernel time,
// and the later ones say they were replayed; the server's metrics count
// exactly as many graph launches as reports say so.
TEST_F(GpuServerTest, RepeatedSmallRequestsReplayFromAGraphBitForBit) {
  const v1::ServerInfo info = Info(*stub_);
  const double launches_before = RequestGraphLaunches();
  int graphed_reports = 0;
  for (const bool tiny : {true, false}) {
    for (const auto& v : info.variants()) {
      if (std::find(v.dtypes().begin(), v.dtypes().end(), v1::DTYPE_FLOAT32) == v.dtypes().end())
        continue;
      SCOPED_TRACE(v.name() + (tiny ? " tiny " : " small ") + SeedNote());
      const int64_t m = tiny ? 17 : 131, k = tiny ? 33 : 67, n = tiny ? 9 : 95;
      const v1::Matrix a = RandomMatrix<float>(m, k, rng_), b = RandomMatrix<float>(k, n, rng_);
      const std::vector<double> ref = ReferenceOf(v.op(), a, b);
      const double tol = v.reduced_precision()     ? 5e-3
                         : v.op() == v1::OP_REDUCE ? 1e-5 * double(m)
                                                   : 1e-4;
      std::string first;
      int replayed = 0;
      for (int i = 0; i < 8; ++i) {
        const auto [s, out, report] = SendOp(*stub_, v.op(), a, b, v.name());
        ASSERT_TRUE(s.ok()) << "send " << i << ": " << s.error_message();
        const bool graph = ReplayedFromGraph(report);
        if (i == 0) {
          EXPECT_LE(MaxError(out, ref), tol);
          first = out.data();
        } else {
          EXPECT_TRUE(out.data() == first)
              << "send " << i << " differs from the first" << (graph ? " (graph)" : "");
        }
        replayed += graph;
        graphed_reports += graph;
        // Graph or not, the marks fired and were read: the kernel's time is
        // there (a 1x1 kernel may round down to 0 us, these do not).
        EXPECT_GE(report.compute_us(), 0);
        if (!tiny) {
          EXPECT_GT(report.compute_us(), 0) << report.device();
        }
      }
      // A stream sees a key twice before it replays it. Slots are lent last
      // in, first out, so sends one after another mostly reuse one stream:
      // 8 of them reach at least one replay.
      EXPECT_GE(replayed, 1);
    }
  }
  EXPECT_GT(graphed_reports, 0);
  EXPECT_EQ(RequestGraphLaunches() - launches_before, double(graphed_reports));
}

// Many threads at once, on every stream: a stream's first sightings of the
// request are queued call by call, its next ones captured and replayed
// while other streams run theirs, and requests that waited together run as
// batches (batching is on by default). Every answer is the same bits.
TEST_F(GpuServerTest, ConcurrentSmallRequestsMatchBitForBitGraphedOrNot) {
  const v1::ServerInfo info = Info(*stub_);
  for (const auto& v : info.variants()) {
    if (v.op() == v1::OP_REDUCE || v.reduced_precision() ||
        std::find(v.dtypes().begin(), v.dtypes().end(), v1::DTYPE_FLOAT32) == v.dtypes().end())
      continue;
    SCOPED_TRACE(v.name() + " " + SeedNote());
    const int64_t m = 45, k = 61, n = 29;
    const v1::Matrix a = RandomMatrix<float>(m, k, rng_), b = RandomMatrix<float>(k, n, rng_);
    const double launches_before = RequestGraphLaunches();
    // Alone first: the second send captures, the third replays.
    std::string first;
    int graphed = 0;
    for (int i = 0; i < 3; ++i) {
      const auto [s, out, report] = SendOp(*stub_, v.op(), a, b, v.name());
      ASSERT_TRUE(s.ok()) << s.error_message();
      if (i == 0) {
        EXPECT_LE(MaxError(out, ReferenceOf(v.op(), a, b)), 1e-4);
        first = out.data();
      }
      EXPECT_TRUE(out.data() == first) << "alone, send " << i;
      graphed += ReplayedFromGraph(report);
    }
    constexpr int kThreads = 12, kSends = 16;
    std::vector<std::vector<testing::OpAnswer>> answers(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kSends; ++i)
          answers[t].push_back(SendOp(*stub_, v.op(), a, b, v.name()));
      });
    }
    for (auto& thread : threads) thread.join();
    int called = 0, batched = 0, differing = 0;
    for (const auto& thread_answers : answers) {
      for (const auto& [s, out, report] : thread_answers) {
        ASSERT_TRUE(s.ok()) << s.error_message();
        differing += out.data() != first;
        // A batch's graph is counted apart (work="batch"). A batch the
        // device cannot run as one (its members do not fit one slot) runs
        // member by member, each a request of its own.
        if (RanInABatchGraph(report)) {
          ++batched;
          continue;
        }
        const bool graph = ReplayedFromGraph(report);
        graphed += graph;
        called += !graph;
      }
    }
    EXPECT_EQ(differing, 0) << "of " << kThreads * kSends << " concurrent answers";
    EXPECT_GE(graphed, 1);
    EXPECT_EQ(RequestGraphLaunches() - launches_before, double(graphed));
    std::printf("%s: %d request graph launches, %d queued call by call, %d in batches\n",
                v.name().c_str(), graphed, called, batched);
  }
}

TEST_F(GpuServerTest, ProfileRunsEveryVariantOnTheDevice) {
  v1::ProfileRequest req;
  req.set_op(v1::OP_MATMUL);
  req.set_dtype(v1::DTYPE_FLOAT32);
  req.set_m(511);
  req.set_n(257);
  req.set_k(129);
  grpc::ClientContext ctx;
  v1::ProfileResponse resp;
  const grpc::Status s = stub_->Profile(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(resp.variants_size(), 7);
  for (const auto& row : resp.variants()) {
    EXPECT_TRUE(row.ok()) << row.variant() << ": " << row.error();
    EXPECT_GT(row.median_us(), 0) << row.variant();
    EXPECT_GT(row.fraction_of_roofline(), 0) << row.variant();
    EXPECT_LE(row.fraction_of_roofline(), 1.5) << row.variant();
  }
  for (int i = 1; i < resp.variants_size(); ++i) {
    EXPECT_LE(resp.variants(i - 1).median_us(), resp.variants(i).median_us());
  }
  EXPECT_NE(resp.selected(), "cublas_tf32") << "auto must not pick TF32 unless allowed";
  EXPECT_GT(resp.peak_gflops(), 1000);
}

TEST_F(GpuServerTest, ReportBreaksDownALargeRequest) {
  v1::TransposeRequest req;
  *req.mutable_input() = RandomMatrix<float>(4096, 4096, rng_);  // 64 MiB
  v1::TransposeResponse resp;
  // Repeated so steady-state figures are printed (the first request warms up).
  for (int i = 0; i < 6; ++i) {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Transpose(&ctx, req, &resp).ok());
    const auto& r = resp.report();
    const int64_t stages = r.queue_us() + r.upload_us() + r.compute_us() + r.download_us();
    std::printf(
        "64 MiB transpose: total %lld us, queue %lld, upload %lld (%.1f GB/s), compute %lld, "
        "download %lld (%.1f GB/s), server-added %lld us (%.1f%% of total)\n",
        (long long)r.total_us(), (long long)r.queue_us(), (long long)r.upload_us(),
        67108864.0 / std::max<int64_t>(1, r.upload_us()) / 1e3, (long long)r.compute_us(),
        (long long)r.download_us(), 67108864.0 / std::max<int64_t>(1, r.download_us()) / 1e3,
        (long long)(r.total_us() - stages),
        100.0 * double(r.total_us() - stages) / double(r.total_us()));
  }
  const auto& r = resp.report();
  EXPECT_GT(r.upload_us(), 0);
  EXPECT_GT(r.compute_us(), 0);
  EXPECT_GT(r.download_us(), 0);
  EXPECT_GE(r.total_us(), r.queue_us() + r.upload_us() + r.compute_us() + r.download_us());
  EXPECT_EQ(MaxError(resp.output(), kernels::ReferenceResult(
                                        ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
                                        req.input().data().data(), nullptr)),
            0.0);
}

TEST_F(GpuServerTest, SixtyFourConcurrentClientsMixedOpsAndSizes) {
  const auto failures = testing::RunMixedClients(server_->target(), 64, 5, 300, seed_);
  EXPECT_TRUE(failures.empty()) << failures.front() << " (" << failures.size()
                                << " clients failed, " << SeedNote() << ")";
}

TEST_F(GpuServerTest, PooledMemoryStaysFlatOverAThousandRequests) {
  auto run = [&](int count) {
    std::vector<std::future<bool>> workers;
    for (int w = 0; w < 8; ++w) {
      workers.push_back(std::async(std::launch::async, [&, w] {
        auto stub = v1::Compute::NewStub(Connect(server_->target()));
        std::mt19937_64 rng(seed_ + w);
        v1::MatMulRequest req;
        *req.mutable_a() = RandomMatrix<float>(256, 192, rng);
        *req.mutable_b() = RandomMatrix<float>(192, 320, rng);
        bool ok = true;
        for (int i = w; i < count; i += 8) {
          grpc::ClientContext ctx;
          v1::MatMulResponse resp;
          ok &= stub->MatMul(&ctx, req, &resp).ok();
        }
        return ok;
      }));
    }
    for (auto& f : workers) EXPECT_TRUE(f.get());
  };
  run(200);  // warm-up: the pool reaches its working size
  const v1::DeviceInfo before = Info(*stub_).devices(0);
  run(1000);
  const v1::DeviceInfo after = Info(*stub_).devices(0);
  EXPECT_EQ(after.device_malloc_calls(), before.device_malloc_calls());
  EXPECT_EQ(after.host_alloc_calls(), before.host_alloc_calls());
  EXPECT_EQ(after.pool_reserved_bytes(), before.pool_reserved_bytes());
  EXPECT_EQ(after.pool_growths(), before.pool_growths());
  std::printf(
      "pool reserved %lld bytes, growths %lld, cudaMalloc calls %lld, cudaHostAlloc calls %lld\n",
      (long long)after.pool_reserved_bytes(), (long long)after.pool_growths(),
      (long long)after.device_malloc_calls(), (long long)after.host_alloc_calls());
}

TEST_F(GpuServerTest, CancelledLargeRequestReturnsItsMemory) {
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<double>(4096, 4096, rng_);
  *req.mutable_b() = RandomMatrix<double>(4096, 4096, rng_);
  req.set_variant("naive");  // slow enough to cancel mid-flight
  grpc::ClientContext ctx;
  v1::MatMulResponse resp;
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ctx.TryCancel();
  });
  EXPECT_EQ(stub_->MatMul(&ctx, req, &resp).error_code(), grpc::CANCELLED);
  cancel.join();
  int64_t used = -1;
  for (int i = 0; i < 100 && used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    used = Info(*stub_).devices(0).pool_used_bytes();
  }
  EXPECT_EQ(used, 0) << "device memory still in use after the cancelled request";
}

// A MatMul taller than a 2-D kernel's grid holds: naming that variant is
// INVALID_ARGUMENT saying so; "auto" picks one that takes it.
TEST_F(GpuServerTest, AVariantThatCannotTakeTheShapeSaysSoAndAutoAvoidsIt) {
  const int64_t m = int64_t{65535} * 8 + 1;  // one row past naive's grid
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(m, 3, rng_);
  *req.mutable_b() = RandomMatrix<float>(3, 2, rng_);
  req.set_variant("naive");
  grpc::ClientContext c1;
  v1::MatMulResponse resp;
  const grpc::Status refused = stub_->MatMul(&c1, req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_NE(refused.error_message().find("\"naive\" takes MatMul with m <= 524280"),
            std::string::npos)
      << refused.error_message();
  req.set_variant("auto");
  grpc::ClientContext c2;
  const grpc::Status s = stub_->MatMul(&c2, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(resp.report().variant(), "naive");
  EXPECT_LE(MaxError(resp.c(),
                     kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, req.a(), &req.b()),
                                              req.a().data().data(), req.b().data().data())),
            1e-4);
}

// ---- tensors ----

std::string BytesOf(const v1::Matrix& m) { return m.data(); }

// Every variant by name on tensors: inputs read in place (upload_us 0), the
// result kept (download_us 0) or returned; small shapes (the slot's scratch)
// and ones past 1 MiB (the pool).
TEST_F(GpuServerTest, EveryVariantOnTensorsKeptOrReturned) {
  const v1::ServerInfo info = Info(*stub_);
  EXPECT_GT(info.tensor_memory_bytes(), 0);
  EXPECT_EQ(info.tensor_ttl_seconds(), 600);
  for (const bool large : {false, true}) {
    const int64_t m = large ? 601 : 131, k = large ? 257 : 67, n = large ? 533 : 95;
    for (const auto& v : info.variants()) {
      for (int dtype : v.dtypes()) {
        // 16-bit requests are not built here (tests/gpu/half_matmul_test.cc
        // checks the kernels).
        if (dtype != v1::DTYPE_FLOAT32 && dtype != v1::DTYPE_FLOAT64) continue;
        const bool f64 = dtype == v1::DTYPE_FLOAT64;
        const double tol = v.reduced_precision() ? 5e-3 : f64 ? 1e-12 : 1e-4;
        SCOPED_TRACE(v.name() + (f64 ? " float64 " : " float32 ") + (large ? "large " : "small ") +
                     SeedNote());
        const v1::Matrix a =
            f64 ? RandomMatrix<double>(m, k, rng_) : RandomMatrix<float>(m, k, rng_);
        const v1::Matrix b =
            f64 ? RandomMatrix<double>(k, n, rng_) : RandomMatrix<float>(k, n, rng_);
        v1::TensorInfo ta, tb;
        ASSERT_TRUE(testing::UploadBytes(*stub_, a.dtype(), m, k, BytesOf(a), {65537}, &ta).ok());
        ASSERT_TRUE(testing::UploadBytes(*stub_, b.dtype(), k, n, BytesOf(b), {1 << 20}, &tb).ok());
        for (const bool keep : {false, true}) {
          auto [s, out, report] = SendOp(*stub_, v.op(), testing::TensorMatrix(ta.id()),
                                         testing::TensorMatrix(tb.id()), v.name(), keep);
          const std::vector<double> ref = ReferenceOf(v.op(), a, b);
          ASSERT_TRUE(s.ok()) << s.error_message() << (keep ? " (keep)" : "");
          EXPECT_EQ(report.variant(), v.name());
          EXPECT_EQ(report.upload_us(), 0);
          EXPECT_GT(report.compute_us(), 0);
          const double op_tol = v.op() == v1::OP_REDUCE ? (f64 ? 1e-12 : 1e-5) * double(m) : tol;
          if (keep) {
            EXPECT_EQ(report.download_us(), 0);
            ASSERT_EQ(out.payload_case(), v1::Matrix::kTensorId);
            std::string bytes;
            ASSERT_TRUE(testing::DownloadBytes(*stub_, out.tensor_id(), &bytes, 0, true).ok());
            out.set_data(bytes);
          }
          EXPECT_LE(MaxError(out, ref), op_tol) << (keep ? "kept" : "returned");
        }
        testing::ReleaseTensors(*stub_, {ta.id(), tb.id()});
      }
    }
  }
  EXPECT_TRUE(testing::WaitForHeld(*stub_, [](int64_t held) { return held == 0; }));
}

TEST_F(GpuServerTest, TensorBytesComeFromTheDevicePoolAndGoBack) {
  // 130 MiB of float32: over the largest block the tensor-block cache keeps
  // (half of its 256 MiB default), so the release hands the bytes back to
  // the pool. A smaller tensor's block would stay charged, kept for reuse.
  const int64_t rows = 4096, cols = 8320;
  const int64_t used_before = Info(*stub_).devices(0).pool_used_bytes();
  v1::TensorInfo t;
  const std::string bytes(size_t(rows * cols * 4), '\x3f');
  ASSERT_TRUE(
      testing::UploadBytes(*stub_, v1::DTYPE_FLOAT32, rows, cols, bytes, {16 << 20}, &t).ok());
  EXPECT_EQ(t.device().rfind("cuda:0 ", 0), 0u) << t.device();
  EXPECT_GE(Info(*stub_).devices(0).pool_used_bytes(), used_before + rows * cols * 4);
  std::string back;
  ASSERT_TRUE(testing::DownloadBytes(*stub_, t.id(), &back, 0, true).ok());
  EXPECT_TRUE(back == bytes);
  int64_t used = -1;
  for (int i = 0; i < 100 && used != used_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    used = Info(*stub_).devices(0).pool_used_bytes();
  }
  EXPECT_EQ(used, used_before);
}

// MatMul -> Transpose -> Reduce on kept tensors, 30 ops: no report shows an
// upload or a download, and the final tensor matches float64.
TEST_F(GpuServerTest, AKeptChainMovesNoMatrixBytes) {
  const int64_t n = 256;
  v1::Matrix mm = RandomMatrix<double>(n, n, rng_), xm = RandomMatrix<double>(n, n, rng_);
  std::vector<double> mv(n * n), xv(n * n);
  std::memcpy(mv.data(), mm.data().data(), n * n * 8);
  std::memcpy(xv.data(), xm.data().data(), n * n * 8);
  for (double& v : mv) v /= std::sqrt(double(n));
  mm.set_data(std::string(reinterpret_cast<const char*>(mv.data()), n * n * 8));
  v1::TensorInfo tm, tx;
  ASSERT_TRUE(
      testing::UploadBytes(*stub_, v1::DTYPE_FLOAT64, n, n, mm.data(), {1 << 20}, &tm).ok());
  ASSERT_TRUE(
      testing::UploadBytes(*stub_, v1::DTYPE_FLOAT64, n, n, xm.data(), {1 << 20}, &tx).ok());
  std::string x = tx.id();
  for (int round = 0; round < 10; ++round) {
    v1::MatMulRequest mr;
    *mr.mutable_a() = testing::TensorMatrix(x);
    *mr.mutable_b() = testing::TensorMatrix(tm.id());
    mr.mutable_output()->set_keep(true);
    grpc::ClientContext c1;
    v1::MatMulResponse r1;
    ASSERT_TRUE(stub_->MatMul(&c1, mr, &r1).ok());
    v1::TransposeRequest tr;
    *tr.mutable_input() = testing::TensorMatrix(r1.c().tensor_id());
    tr.mutable_output()->set_keep(true);
    grpc::ClientContext c2;
    v1::TransposeResponse r2;
    ASSERT_TRUE(stub_->Transpose(&c2, tr, &r2).ok());
    v1::ReduceRequest rr;
    *rr.mutable_input() = testing::TensorMatrix(r2.output().tensor_id());
    rr.mutable_output()->set_keep(true);
    grpc::ClientContext c3;
    v1::ReduceResponse r3;
    ASSERT_TRUE(stub_->Reduce(&c3, rr, &r3).ok());
    for (const v1::ExecutionReport* r : {&r1.report(), &r2.report(), &r3.report()}) {
      EXPECT_EQ(r->upload_us(), 0);
      EXPECT_EQ(r->download_us(), 0);
    }
    testing::ReleaseTensors(*stub_, {x, r1.c().tensor_id(), r3.output().tensor_id()});
    x = r2.output().tensor_id();
    std::vector<double> y(n * n, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t l = 0; l < n; ++l)
        for (int64_t j = 0; j < n; ++j) y[i * n + j] += xv[i * n + l] * mv[l * n + j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) xv[j * n + i] = y[i * n + j];
  }
  std::string bytes;
  ASSERT_TRUE(testing::DownloadBytes(*stub_, x, &bytes, 0, true).ok());
  v1::Matrix got = xm;
  got.set_data(bytes);
  EXPECT_LE(MaxError(got, xv), 1e-10);
  testing::ReleaseTensors(*stub_, {tm.id()});
  EXPECT_TRUE(testing::WaitForHeld(*stub_, [](int64_t held) { return held == 0; }));
}

// 3 GiB of float32 (32768 x 24576 = 805 M elements) goes up in 16 MiB
// messages, is transposed by every variant and reduced on the device, and
// the transposed tensor comes down correct. Values are generated from their
// index on both sides, so the client never holds the payload.
float ValueAt(int64_t index) {
  return float(int64_t((uint64_t(index) * 2654435761u) % 2001) - 1000) / 1024.0f;
}

TEST(GpuTensorLarge, ThreeGiBUpTransposedReducedAndDown) {
  SKIP_WITHOUT_GPU();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=0"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  const v1::ServerInfo info = Info(*stub);
  const int64_t rows = 32768, cols = 24576, bytes = rows * cols * 4;
  if (info.tensor_memory_bytes() < 2 * bytes) {
    GTEST_SKIP() << "tensor budget " << info.tensor_memory_bytes()
                 << " bytes holds no two 3 GiB tensors";
  }
  std::vector<double> row_sums(rows, 0);
  v1::TensorInfo t;
  const auto up_start = std::chrono::steady_clock::now();
  grpc::Status s = testing::UploadFrom(
      *stub, v1::DTYPE_FLOAT32, rows, cols, bytes,
      [&row_sums](int64_t offset, char* dst, int64_t n) {
        for (int64_t i = 0; i < n / 4; ++i) {
          const int64_t index = offset / 4 + i;
          const float v = ValueAt(index);
          std::memcpy(dst + 4 * i, &v, 4);
          row_sums[size_t(index / 24576)] += v;
        }
      },
      {16 << 20}, &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const double up_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - up_start).count();
  std::printf("3 GiB upload: %.2f s (%.2f GB/s)\n", up_s, double(bytes) / up_s / 1e9);
  EXPECT_EQ(t.bytes(), bytes);

  // Each transpose variant by name, checked by reducing its result on the
  // device (column sums of the transpose are the row sums of the input).
  std::string kept;
  for (const auto& v : info.variants()) {
    if (v.op() != v1::OP_TRANSPOSE || v.reduced_precision()) continue;
    SCOPED_TRACE(v.name());
    v1::TransposeRequest tr;
    *tr.mutable_input() = testing::TensorMatrix(t.id());
    tr.set_variant(v.name());
    tr.mutable_output()->set_keep(true);
    grpc::ClientContext c1;
    v1::TransposeResponse r1;
    s = stub->Transpose(&c1, tr, &r1);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(r1.report().upload_us(), 0);
    EXPECT_EQ(r1.report().download_us(), 0);
    v1::ReduceRequest rr;
    *rr.mutable_input() = testing::TensorMatrix(r1.output().tensor_id());
    rr.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
    grpc::ClientContext c2;
    v1::ReduceResponse r2;
    s = stub->Reduce(&c2, rr, &r2);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(MaxError(r2.output(), row_sums), 1e-5 * double(cols)) << r2.report().variant();
    if (kept.empty()) {
      kept = r1.output().tensor_id();
    } else {
      testing::ReleaseTensors(*stub, {r1.output().tensor_id()});
    }
  }
  // Every reduce variant over the whole input.
  double total = 0;
  for (double r : row_sums) total += r;
  for (const auto& v : info.variants()) {
    if (v.op() != v1::OP_REDUCE) continue;
    v1::ReduceRequest rr;
    *rr.mutable_input() = testing::TensorMatrix(t.id());
    rr.set_variant(v.name());
    grpc::ClientContext ctx;
    v1::ReduceResponse resp;
    s = stub->Reduce(&ctx, rr, &resp);
    ASSERT_TRUE(s.ok()) << v.name() << ": " << s.error_message();
    EXPECT_LE(MaxError(resp.output(), {total}), 1e-5 * double(rows * cols)) << v.name();
  }
  // The transposed tensor comes down, checked element by element.
  int64_t wrong = 0, received = 0;
  const auto down_start = std::chrono::steady_clock::now();
  s = testing::DownloadTo(*stub, kept, 0, true, [&](int64_t offset, const std::string& data) {
    for (int64_t i = 0; i < int64_t(data.size()) / 4; ++i) {
      const int64_t out_index = offset / 4 + i;  // (c, r) of the cols x rows result
      const int64_t c = out_index / rows, r = out_index % rows;
      float got;
      std::memcpy(&got, data.data() + 4 * i, 4);
      wrong += got != ValueAt(r * cols + c);
    }
    received += int64_t(data.size());
  });
  ASSERT_TRUE(s.ok()) << s.error_message();
  const double down_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - down_start).count();
  std::printf("3 GiB download: %.2f s (%.2f GB/s, with the check)\n", down_s,
              double(bytes) / down_s / 1e9);
  EXPECT_EQ(received, bytes);
  EXPECT_EQ(wrong, 0);
  testing::ReleaseTensors(*stub, {t.id()});
  EXPECT_TRUE(testing::WaitForHeld(*stub, [](int64_t held) { return held == 0; }));
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// Upload and Download rates of 4 GiB over one connection, printed for
// bench/RESULTS.md: the client sends one 16 MiB buffer over and over and
// drops what it receives, so its own work is a message copy each way.
TEST(GpuTensorLarge, FourGiBStreamRates) {
  SKIP_WITHOUT_GPU();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=0"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  const int64_t rows = 65536, cols = 16384, bytes = rows * cols * 4;  // 4 GiB of float32
  if (Info(*stub).tensor_memory_bytes() < bytes) GTEST_SKIP() << "tensor budget below 4 GiB";
  const std::string block(16 << 20, '\x01');
  v1::TensorInfo t;
  const auto up_start = std::chrono::steady_clock::now();
  grpc::Status s = testing::UploadFrom(
      *stub, v1::DTYPE_FLOAT32, rows, cols, bytes,
      [&block](int64_t, char* dst, int64_t n) { std::memcpy(dst, block.data(), size_t(n)); },
      {16 << 20}, &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const double up_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - up_start).count();
  int64_t received = 0;
  const auto down_start = std::chrono::steady_clock::now();
  s = testing::DownloadTo(*stub, t.id(), 0, true, [&received](int64_t, const std::string& data) {
    received += int64_t(data.size());
  });
  ASSERT_TRUE(s.ok()) << s.error_message();
  const double down_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - down_start).count();
  EXPECT_EQ(received, bytes);
  std::printf("4 GiB over one connection: Upload %.2f s (%.2f GB/s), Download %.2f s (%.2f GB/s)\n",
              up_s, double(bytes) / up_s / 1e9, down_s, double(bytes) / down_s / 1e9);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// A tensor on another GPU: the op runs where the first operand is and the
// other is copied peer to peer, which the report's device says.
TEST(GpuServerMultiDevice, ATensorOnAnotherGpuIsCopiedPeerToPeer) {
  if (GpuCount() < 2) GTEST_SKIP() << "needs two GPUs, found " << GpuCount();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=all"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  std::mt19937_64 rng(FreshSeed());
  const v1::Matrix a = RandomMatrix<float>(700, 300, rng), b = RandomMatrix<float>(300, 500, rng);
  v1::TensorInfo ta, tb;
  ASSERT_TRUE(
      testing::UploadBytes(*stub, v1::DTYPE_FLOAT32, 700, 300, a.data(), {1 << 20}, &ta).ok());
  ASSERT_TRUE(
      testing::UploadBytes(*stub, v1::DTYPE_FLOAT32, 300, 500, b.data(), {1 << 20}, &tb).ok());
  ASSERT_NE(ta.device(), tb.device()) << "new tensors go to the device holding the fewest bytes";
  v1::MatMulRequest req;
  *req.mutable_a() = testing::TensorMatrix(ta.id());
  *req.mutable_b() = testing::TensorMatrix(tb.id());
  grpc::ClientContext ctx;
  v1::MatMulResponse resp;
  const grpc::Status s = stub->MatMul(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.report().device().rfind(ta.device(), 0), 0u) << resp.report().device();
  EXPECT_NE(resp.report().device().find("b copied from cuda:"), std::string::npos)
      << resp.report().device();
  EXPECT_LE(MaxError(resp.c(), kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, a, &b),
                                                        a.data().data(), b.data().data())),
            1e-4);
  testing::ReleaseTensors(*stub, {ta.id(), tb.id()});
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// A request larger than the device budget is refused; small ones still run.
TEST(GpuServerLimits, OversizeRequestRefusedWhileOthersSucceed) {
  SKIP_WITHOUT_GPU();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--backend=cuda", "--devices=0", "--device_memory_fraction=0.001"});
  ASSERT_TRUE(server.started());
  std::mt19937_64 rng(FreshSeed());
  auto small = std::async(std::launch::async, [&] {
    auto stub = v1::Compute::NewStub(Connect(server.target()));
    int ok = 0;
    for (int i = 0; i < 50; ++i) {
      std::mt19937_64 r(i);
      v1::TransposeRequest req;
      *req.mutable_input() = RandomMatrix<float>(64, 48, r);
      grpc::ClientContext ctx;
      v1::TransposeResponse resp;
      ok += stub->Transpose(&ctx, req, &resp).ok();
    }
    return ok;
  });
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  v1::TransposeRequest big;
  *big.mutable_input() = RandomMatrix<float>(8192, 8192, rng);  // 256 MiB in, 256 MiB out
  grpc::ClientContext ctx;
  v1::TransposeResponse resp;
  const grpc::Status s = stub->Transpose(&ctx, big, &resp);
  EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("device memory"), std::string::npos) << s.error_message();
  EXPECT_EQ(small.get(), 50);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// With --calibrate_as_served, the first small auto request whose matrices
// travel in the call times each candidate served as that request is (and
// checks what serving returned); its choice stays its own. A Profile of the
// same shape (kernels alone) sets the choice of requests on tensors, not
// of these. The server's log shows both calibrations.
TEST(GpuServerCalibratedAsServed, SmallInlineRequestsKeepTheirChoiceThroughAProfile) {
  SKIP_WITHOUT_GPU();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--backend=cuda", "--devices=0", "--calibrate_as_served"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int64_t m = 61, k = 47, n = 53;  // 34 KiB in all: small, zero-copy
  const v1::Matrix a = RandomMatrix<float>(m, k, rng), b = RandomMatrix<float>(k, n, rng);
  const std::vector<double> ref = ReferenceOf(v1::OP_MATMUL, a, b);
  auto send_inline = [&] {
    const auto [s, out, report] = SendOp(*stub, v1::OP_MATMUL, a, b, "auto");
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(MaxError(out, ref), 1e-4) << report.variant();
    return report.variant();
  };
  const std::string inline_choice = send_inline();
  ASSERT_FALSE(inline_choice.empty());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(send_inline(), inline_choice);

  v1::ProfileRequest profile;
  profile.set_op(v1::OP_MATMUL);
  profile.set_dtype(v1::DTYPE_FLOAT32);
  profile.set_m(m);
  profile.set_n(n);
  profile.set_k(k);
  v1::ProfileResponse profiled;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->Profile(&ctx, profile, &profiled);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_FALSE(profiled.selected().empty());
  std::printf("served from host memory: %s; kernels alone (Profile): %s\n", inline_choice.c_str(),
              profiled.selected().c_str());

  EXPECT_EQ(send_inline(), inline_choice);
  v1::TensorInfo ta, tb;
  ASSERT_TRUE(testing::UploadBytes(*stub, a.dtype(), m, k, BytesOf(a), {1 << 20}, &ta).ok());
  ASSERT_TRUE(testing::UploadBytes(*stub, b.dtype(), k, n, BytesOf(b), {1 << 20}, &tb).ok());
  const auto [ts, tout, treport] = SendOp(*stub, v1::OP_MATMUL, testing::TensorMatrix(ta.id()),
                                          testing::TensorMatrix(tb.id()), "auto");
  ASSERT_TRUE(ts.ok()) << ts.error_message();
  EXPECT_LE(MaxError(tout, ref), 1e-4);
  EXPECT_EQ(treport.variant(), profiled.selected());
  testing::ReleaseTensors(*stub, {ta.id(), tb.id()});
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

TEST(GpuServerMultiDevice, EveryGpuReceivesWork) {
  if (GpuCount() < 2) GTEST_SKIP() << "needs two GPUs, found " << GpuCount();
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=all"});
  ASSERT_TRUE(server.started());
  std::mutex mu;
  std::set<std::string> devices;
  std::vector<std::future<void>> clients;
  for (int c = 0; c < 16; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      auto stub = v1::Compute::NewStub(Connect(server.target()));
      std::mt19937_64 rng(c);
      v1::MatMulRequest req;
      *req.mutable_a() = RandomMatrix<float>(1024, 1024, rng);
      *req.mutable_b() = RandomMatrix<float>(1024, 1024, rng);
      for (int i = 0; i < 8; ++i) {
        grpc::ClientContext ctx;
        v1::MatMulResponse resp;
        if (stub->MatMul(&ctx, req, &resp).ok()) {
          std::lock_guard<std::mutex> lock(mu);
          devices.insert(resp.report().device());
        }
      }
    }));
  }
  for (auto& f : clients) f.get();
  EXPECT_GE(devices.size(), 2u);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace gpucompute
