// End to end on the CUDA backend: the real server on loopback, every variant
// by name, 64 concurrent clients, pooled memory flat in steady state, an
// over-size request refused while others succeed, cancellation returning
// memory, and work on every GPU. Skips with a message when no GPU exists.
#include <cuda_runtime.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <set>
#include <thread>

#include "support/e2e_util.h"
#include "gpucompute/kernels/reference.h"
#include "support/server_process.h"

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

#define SKIP_WITHOUT_GPU()                                                 \
  if (GpuCount() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped"

v1::ServerInfo Info(v1::Compute::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub.GetServerInfo(&ctx, {}, &info).ok());
  return info;
}

class GpuServerTest : public testing::SeededStubTest {
 protected:
  static void SetUpTestSuite() {
    if (GpuCount() == 0) return;
    server_ = new ServerProcess(GPUCOMPUTE_SERVER_PATH, {"--backend=cuda", "--devices=0"});
  }
  static void TearDownTestSuite() {
    if (server_) {
      EXPECT_EQ(server_->Stop(SIGTERM), 0);
    }
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_TRUE(server_ && server_->started()) << "server did not start on the GPU";
    ConnectTo(server_->target());
  }

  static ServerProcess* server_;
};
ServerProcess* GpuServerTest::server_ = nullptr;

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
  for (const char* name : {"naive", "tiled16", "tiled32", "tiled32_padded", "register_tiled", "cublas", "cublas_tf32"}) {
    EXPECT_TRUE(matmul.count(name)) << name;
  }
}

// Every registered variant by name, both dtypes where supported, odd shapes:
// small ones (the slot's scratch path) and ones past 1 MiB (the pool path).
TEST_F(GpuServerTest, EveryVariantByNameIsCorrect) {
  const v1::ServerInfo info = Info(*stub_);
  for (const bool large : {false, true}) {
    // MatMul m x k times k x n; Transpose and Reduce rows x cols.
    const int64_t m = large ? 601 : 131, k = large ? 257 : 67, n = large ? 533 : 95;
    const int64_t rows = large ? 1031 : 257, cols = large ? 301 : 33;
    const int64_t reduce_rows = large ? 1031 : 301, reduce_cols = large ? 303 : 77;
    for (const auto& v : info.variants()) {
      for (int dtype : v.dtypes()) {
        const bool f64 = dtype == v1::DTYPE_FLOAT64;
        const double tol = v.reduced_precision() ? 5e-3 : f64 ? 1e-12 : 1e-4;
        SCOPED_TRACE(v.name() + (f64 ? " float64 " : " float32 ") + (large ? "large " : "small ") + SeedNote());
        grpc::ClientContext ctx;
        if (v.op() == v1::OP_MATMUL) {
          v1::MatMulRequest req;
          *req.mutable_a() = f64 ? RandomMatrix<double>(m, k, rng_) : RandomMatrix<float>(m, k, rng_);
          *req.mutable_b() = f64 ? RandomMatrix<double>(k, n, rng_) : RandomMatrix<float>(k, n, rng_);
          req.set_variant(v.name());
          v1::MatMulResponse resp;
          const grpc::Status s = stub_->MatMul(&ctx, req, &resp);
          ASSERT_TRUE(s.ok()) << s.error_message();
          EXPECT_EQ(resp.report().variant(), v.name());
          EXPECT_LE(MaxError(resp.c(), kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, req.a(), &req.b()),
                                                                req.a().data().data(), req.b().data().data())),
                    tol);
        } else if (v.op() == v1::OP_TRANSPOSE) {
          v1::TransposeRequest req;
          *req.mutable_input() = f64 ? RandomMatrix<double>(rows, cols, rng_) : RandomMatrix<float>(rows, cols, rng_);
          req.set_variant(v.name());
          v1::TransposeResponse resp;
          const grpc::Status s = stub_->Transpose(&ctx, req, &resp);
          ASSERT_TRUE(s.ok()) << s.error_message();
          EXPECT_EQ(MaxError(resp.output(), kernels::ReferenceResult(ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
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
            EXPECT_LE(MaxError(resp.output(), kernels::ReferenceResult(p, input.data().data(), nullptr)),
                      (f64 ? 1e-12 : 1e-5) * double(reduce_rows * reduce_cols)) << "axis " << axis;
          }
        }
      }
    }
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
    std::printf("64 MiB transpose: total %lld us, queue %lld, upload %lld (%.1f GB/s), compute %lld, "
                "download %lld (%.1f GB/s), server-added %lld us (%.1f%% of total)\n",
                (long long)r.total_us(), (long long)r.queue_us(), (long long)r.upload_us(),
                67108864.0 / std::max<int64_t>(1, r.upload_us()) / 1e3, (long long)r.compute_us(),
                (long long)r.download_us(), 67108864.0 / std::max<int64_t>(1, r.download_us()) / 1e3,
                (long long)(r.total_us() - stages), 100.0 * double(r.total_us() - stages) / double(r.total_us()));
  }
  const auto& r = resp.report();
  EXPECT_GT(r.upload_us(), 0);
  EXPECT_GT(r.compute_us(), 0);
  EXPECT_GT(r.download_us(), 0);
  EXPECT_GE(r.total_us(), r.queue_us() + r.upload_us() + r.compute_us() + r.download_us());
  EXPECT_EQ(MaxError(resp.output(), kernels::ReferenceResult(ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
                                                             req.input().data().data(), nullptr)),
            0.0);
}

TEST_F(GpuServerTest, SixtyFourConcurrentClientsMixedOpsAndSizes) {
  const auto failures = testing::RunMixedClients(server_->target(), 64, 5, 300, seed_);
  EXPECT_TRUE(failures.empty()) << failures.front() << " (" << failures.size() << " clients failed, "
                                << SeedNote() << ")";
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
  std::printf("pool reserved %lld bytes, growths %lld, cudaMalloc calls %lld, cudaHostAlloc calls %lld\n",
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
