// End to end over loopback: the real server binary on the CPU backend, every
// RPC, every error row reachable without a GPU, a 64 MiB matrix, health,
// reflection, 32 concurrent clients, and a clean drain on SIGTERM.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "protos/reflection_client.grpc.pb.h"
#include "server/grpc/convert.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/run_command.h"
#include "support/server_process.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::FreshSeed;
using testing::MaxError;
using testing::ProblemOf;
using testing::RandomMatrix;
using testing::ServerProcess;

constexpr int64_t kMaxMatrixBytes = 80 << 20;

class CpuServerTest : public testing::SeededStubTest {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(
        GPUCOMPUTE_SERVER_PATH,
        {"--backend=cpu", "--max_matrix_bytes=" + std::to_string(kMaxMatrixBytes)});
    ASSERT_TRUE(server_->started()) << "server did not start";
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ConnectTo(server_->target());
  }

  static ServerProcess* server_;
};
ServerProcess* CpuServerTest::server_ = nullptr;

TEST_F(CpuServerTest, ServerInfo) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_FALSE(info.version().empty());
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).name(), "cpu");
  EXPECT_GT(info.devices(0).memory_bytes(), 0);
  EXPECT_EQ(info.max_matrix_bytes(), kMaxMatrixBytes);
  int per_op[4] = {};
  for (const auto& v : info.variants()) {
    EXPECT_EQ(v.name(), "cpu_reference");
    EXPECT_EQ(v.dtypes_size(), 4);  // every dtype of the table
    EXPECT_FALSE(v.description().empty());
    ++per_op[v.op()];
  }
  EXPECT_EQ(per_op[v1::OP_MATMUL], 1);
  EXPECT_EQ(per_op[v1::OP_TRANSPOSE], 1);
  EXPECT_EQ(per_op[v1::OP_REDUCE], 1);
}

TEST_F(CpuServerTest, MatMulBothDTypesMatchTheReference) {
  for (int dtype = 0; dtype < 2; ++dtype) {
    v1::MatMulRequest req;
    *req.mutable_a() =
        dtype ? RandomMatrix<double>(33, 17, rng_) : RandomMatrix<float>(33, 17, rng_);
    *req.mutable_b() =
        dtype ? RandomMatrix<double>(17, 65, rng_) : RandomMatrix<float>(17, 65, rng_);
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    const int64_t sent_ns = absl::ToUnixNanos(absl::Now());
    const grpc::Status s = stub_->MatMul(&ctx, req, &resp);
    const int64_t answered_ns = absl::ToUnixNanos(absl::Now());
    ASSERT_TRUE(s.ok()) << s.error_message();
    // The server on this host took the request while the call ran.
    EXPECT_GE(resp.report().received_unix_ns(), sent_ns);
    EXPECT_LE(resp.report().received_unix_ns() + resp.report().total_us() * 1000, answered_ns);
    EXPECT_EQ(resp.c().rows(), 33);
    EXPECT_EQ(resp.c().cols(), 65);
    EXPECT_EQ(resp.c().dtype(), req.a().dtype());
    const auto ref = kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, req.a(), &req.b()),
                                              req.a().data().data(), req.b().data().data());
    EXPECT_LE(MaxError(resp.c(), ref), dtype ? 1e-12 : 1e-4) << SeedNote();
    EXPECT_EQ(resp.report().variant(), "cpu_reference");
    EXPECT_EQ(resp.report().device(), "cpu");
    EXPECT_GT(resp.report().total_us(), 0);
    EXPECT_GE(resp.report().total_us(), resp.report().compute_us());
  }
}

TEST_F(CpuServerTest, TransposeIsExactAndNamedVariantRuns) {
  v1::TransposeRequest req;
  *req.mutable_input() = RandomMatrix<float>(31, 33, rng_);
  req.set_variant("cpu_reference");
  grpc::ClientContext ctx;
  v1::TransposeResponse resp;
  ASSERT_TRUE(stub_->Transpose(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.output().rows(), 33);
  EXPECT_EQ(resp.output().cols(), 31);
  const auto ref = kernels::ReferenceResult(
      ProblemOf(kernels::Op::kTranspose, req.input(), nullptr), req.input().data().data(), nullptr);
  EXPECT_EQ(MaxError(resp.output(), ref), 0.0) << SeedNote();
}

TEST_F(CpuServerTest, ReduceEveryOpAndAxis) {
  const v1::Matrix input = RandomMatrix<double>(37, 29, rng_);
  for (int op = 0; op < 4; ++op) {
    for (int axis = 0; axis < 3; ++axis) {
      v1::ReduceRequest req;
      *req.mutable_input() = input;
      req.set_op(static_cast<v1::ReduceOp>(op));
      req.set_axis(static_cast<v1::ReduceAxis>(axis));
      grpc::ClientContext ctx;
      v1::ReduceResponse resp;
      ASSERT_TRUE(stub_->Reduce(&ctx, req, &resp).ok());
      kernels::Problem p = ProblemOf(kernels::Op::kReduce, input, nullptr);
      p.reduce_op = *server::FromProto(req.op());
      p.reduce_axis = *server::FromProto(req.axis());
      EXPECT_EQ(resp.output().rows(), kernels::OutputRows(p));
      EXPECT_EQ(resp.output().cols(), kernels::OutputCols(p));
      const auto ref = kernels::ReferenceResult(p, input.data().data(), nullptr);
      EXPECT_LE(MaxError(resp.output(), ref), 1e-12) << "op " << op << " axis " << axis;
    }
  }
}

TEST_F(CpuServerTest, ProfileEveryOp) {
  for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
    v1::ProfileRequest req;
    req.set_op(op);
    req.set_dtype(v1::DTYPE_FLOAT32);
    req.set_m(67);
    req.set_n(45);
    req.set_k(23);
    req.set_reduce_axis(v1::REDUCE_AXIS_PER_COLUMN);
    req.set_repetitions(3);
    grpc::ClientContext ctx;
    v1::ProfileResponse resp;
    const grpc::Status s = stub_->Profile(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.variants_size(), 1);
    const auto& row = resp.variants(0);
    EXPECT_TRUE(row.ok()) << row.error();
    EXPECT_EQ(row.variant(), "cpu_reference");
    EXPECT_GT(row.median_us(), 0);
    EXPECT_LE(row.min_us(), row.median_us());
    EXPECT_GE(row.max_us(), row.median_us());
    EXPECT_GT(row.gbytes_per_s(), 0);
    EXPECT_GT(row.fraction_of_roofline(), 0);
    EXPECT_EQ(resp.selected(), "cpu_reference");
    EXPECT_EQ(resp.device(), "cpu");
    EXPECT_GT(resp.peak_gbytes_per_s(), 0);
    EXPECT_GT(resp.peak_gflops(), 0);
  }
}

// The CPU's ceilings are measured on every core, beyond the caches, best of
// several runs, so a Profile's fraction stays at or under 1.05, or the row
// says the ceiling is suspect. A reduce is held to the read-only ceiling.
// Its own server measures them (--ceilings= names no file), where the
// others' are told them.
TEST(CpuServerCeilings, ProfileFractionsStayUnderTheMeasuredCeilingOrSayWhy) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--ceilings="});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  struct Case {
    v1::Op op;
    int64_t m, n, k;
    v1::ReduceAxis axis;
  };
  for (const Case& c : {Case{v1::OP_MATMUL, 192, 192, 192, v1::REDUCE_AXIS_ALL},
                        Case{v1::OP_TRANSPOSE, 1536, 1024, 0, v1::REDUCE_AXIS_ALL},
                        Case{v1::OP_REDUCE, 2048, 1024, 0, v1::REDUCE_AXIS_ALL},
                        Case{v1::OP_REDUCE, 2048, 1024, 0, v1::REDUCE_AXIS_PER_COLUMN}}) {
    for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64}) {
      v1::ProfileRequest req;
      req.set_op(c.op);
      req.set_dtype(dtype);
      req.set_m(c.m);
      req.set_n(c.n);
      req.set_k(c.k);
      req.set_reduce_axis(c.axis);
      req.set_repetitions(5);
      grpc::ClientContext ctx;
      v1::ProfileResponse resp;
      const grpc::Status s = stub->Profile(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_GT(resp.peak_read_gbytes_per_s(), 0);
      EXPECT_EQ(resp.comparisons_size(), 0);  // one variant per op on a CPU
      for (const v1::VariantProfile& row : resp.variants()) {
        ASSERT_TRUE(row.ok()) << row.error();
        const std::string what =
            absl::StrCat(v1::Op_Name(c.op), " ", v1::DType_Name(dtype), " ", row.variant(), ": ",
                         row.fraction_of_roofline(), " of the roofline; note: ", row.note());
        std::printf("%s\n", what.c_str());
        EXPECT_TRUE(row.fraction_of_roofline() <= 1.05 ||
                    row.note().find("above the measured ceiling") != std::string::npos)
            << what;
        EXPECT_EQ(row.note().find("no read-only ceiling"), std::string::npos) << what;
        EXPECT_EQ(row.counters_size(), 0);
      }
    }
  }
}

// Cold caches by default: the response says so, and warm_cache turns the
// flush off. (What the flush costs a cache-sized problem is a benchmark's
// question: bench/results/profile.md.)
TEST_F(CpuServerTest, ProfileFlushesTheCachesUnlessAskedForWarmRuns) {
  for (bool warm : {false, true}) {
    v1::ProfileRequest req;
    req.set_op(v1::OP_TRANSPOSE);
    req.set_dtype(v1::DTYPE_FLOAT32);
    req.set_m(257);
    req.set_n(129);
    req.set_repetitions(3);
    req.set_warm_cache(warm);
    grpc::ClientContext ctx;
    v1::ProfileResponse resp;
    const grpc::Status s = stub_->Profile(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.cold_cache(), !warm);
    ASSERT_GT(resp.variants_size(), 0);
    EXPECT_TRUE(resp.variants(0).ok()) << resp.variants(0).error();
    std::printf("%s caches: median %.1f us\n", warm ? "warm" : "cold",
                resp.variants(0).median_us());
  }
}

// Counters asked for on a CPU server: no values, and every row says why.
TEST_F(CpuServerTest, ProfileCountersSayTheyNeedACudaDevice) {
  v1::ProfileRequest req;
  req.set_op(v1::OP_TRANSPOSE);
  req.set_dtype(v1::DTYPE_FLOAT32);
  req.set_m(64);
  req.set_n(48);
  req.set_repetitions(2);
  req.set_counters(true);
  grpc::ClientContext ctx;
  v1::ProfileResponse resp;
  const grpc::Status s = stub_->Profile(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GT(resp.variants_size(), 0);
  for (const v1::VariantProfile& row : resp.variants()) {
    EXPECT_TRUE(row.ok()) << row.error();
    EXPECT_EQ(row.counters_size(), 0);
    EXPECT_NE(
        row.note().find("hardware counters need a CUDA device; this server runs the CPU backend"),
        std::string::npos)
        << row.note();
  }
  // Off by default: no such note.
  req.set_counters(false);
  grpc::ClientContext ctx2;
  v1::ProfileResponse plain;
  ASSERT_TRUE(stub_->Profile(&ctx2, req, &plain).ok());
  for (const v1::VariantProfile& row : plain.variants()) {
    EXPECT_EQ(row.note().find("hardware counters"), std::string::npos) << row.note();
  }
}

// One request per row of docs/contract.md's status table that a CPU server can produce.
TEST_F(CpuServerTest, EveryErrorRowGetsItsCodeAndTheServerKeepsServing) {
  struct Case {
    std::string name;
    v1::MatMulRequest req;
    grpc::StatusCode code;
    std::string field;
  };
  auto good = [&] {
    v1::MatMulRequest r;
    *r.mutable_a() = RandomMatrix<float>(3, 4, rng_);
    *r.mutable_b() = RandomMatrix<float>(4, 5, rng_);
    return r;
  };
  std::vector<Case> cases;
  cases.push_back({"dtype unset", good(), grpc::INVALID_ARGUMENT, "a.dtype"});
  cases.back().req.mutable_a()->set_dtype(v1::DTYPE_UNSPECIFIED);
  cases.push_back({"rows < 1", good(), grpc::INVALID_ARGUMENT, "b.rows"});
  cases.back().req.mutable_b()->set_rows(0);
  cases.push_back({"data length", good(), grpc::INVALID_ARGUMENT, "a.data"});
  cases.back().req.mutable_a()->mutable_data()->pop_back();
  cases.push_back({"dtypes differ", good(), grpc::INVALID_ARGUMENT, "b.dtype"});
  *cases.back().req.mutable_b() = RandomMatrix<double>(4, 5, rng_);
  cases.push_back({"inner dims", good(), grpc::INVALID_ARGUMENT, "b.rows"});
  *cases.back().req.mutable_b() = RandomMatrix<float>(5, 5, rng_);
  cases.push_back({"unknown variant", good(), grpc::INVALID_ARGUMENT, "variant"});
  cases.back().req.set_variant("tiled33");
  cases.push_back({"GPU variant on a CPU server", good(), grpc::INVALID_ARGUMENT, "cublas"});
  cases.back().req.set_variant("cublas");
  cases.push_back(
      {"declared larger than max", good(), grpc::RESOURCE_EXHAUSTED, "max_matrix_bytes"});
  cases.back().req.mutable_a()->set_rows(int64_t{1} << 40);
  cases.push_back({"result larger than max", good(), grpc::RESOURCE_EXHAUSTED, "c (result)"});
  *cases.back().req.mutable_a() = RandomMatrix<float>(8192, 1, rng_);
  *cases.back().req.mutable_b() = RandomMatrix<float>(1, 8192, rng_);

  for (Case& c : cases) {
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    const grpc::Status s = stub_->MatMul(&ctx, c.req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.field), std::string::npos)
        << c.name << ": " << s.error_message();
  }
  // A real matrix above max_matrix_bytes (81 MiB against 80 MiB).
  v1::TransposeRequest big;
  *big.mutable_input() = RandomMatrix<float>(81 * 1024, 256, rng_);
  grpc::ClientContext big_ctx;
  v1::TransposeResponse big_resp;
  EXPECT_EQ(stub_->Transpose(&big_ctx, big, &big_resp).error_code(), grpc::RESOURCE_EXHAUSTED);

  grpc::ClientContext ctx;
  v1::MatMulResponse resp;
  EXPECT_TRUE(stub_->MatMul(&ctx, good(), &resp).ok()) << "server stopped serving after errors";
}

// Bytes that are not a TransposeRequest: the raw request reader refuses
// them with INVALID_ARGUMENT and the server keeps serving.
TEST_F(CpuServerTest, MalformedMessageIsRefused) {
  grpc::GenericStub generic(Connect(server_->target()));
  const std::string garbage("\x0a\xff\xff\xff\xff\x0f\x01", 7);  // field 1 claims 4 GiB
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext ctx;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/gpucompute.v1.Compute/Transpose", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status s = done.get_future().get();
  EXPECT_EQ(s.error_code(), grpc::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("request:"), std::string::npos) << s.error_message();
  grpc::ClientContext info_ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub_->GetServerInfo(&info_ctx, {}, &info).ok());
}

TEST_F(CpuServerTest, DeadlineExceededAndCancelled) {
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(1024, 1024, rng_);
  *req.mutable_b() = RandomMatrix<float>(1024, 1024, rng_);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(5));
    v1::MatMulResponse resp;
    EXPECT_EQ(stub_->MatMul(&ctx, req, &resp).error_code(), grpc::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    std::thread cancel([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ctx.TryCancel();
    });
    EXPECT_EQ(stub_->MatMul(&ctx, req, &resp).error_code(), grpc::CANCELLED);
    cancel.join();
  }
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
}

TEST_F(CpuServerTest, SixtyFourMiBTranspose) {
  v1::TransposeRequest req;
  *req.mutable_input() = RandomMatrix<float>(4096, 4096, rng_);
  grpc::ClientContext ctx;
  v1::TransposeResponse resp;
  const grpc::Status s = stub_->Transpose(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.output().data().size(), size_t{64} << 20);
  const float* in = reinterpret_cast<const float*>(req.input().data().data());
  const float* out = reinterpret_cast<const float*>(resp.output().data().data());
  for (int64_t r = 0; r < 4096; r += 7) {
    for (int64_t c = 0; c < 4096; c += 5) ASSERT_EQ(out[c * 4096 + r], in[r * 4096 + c]);
  }
}

// Echo answers with as many zero bytes as asked, whatever the request's
// payload; a negative size names the field, one past --max_matrix_bytes is
// RESOURCE_EXHAUSTED, and the server keeps serving.
TEST_F(CpuServerTest, EchoAnswersTheBytesAskedForAndRefusesBadSizes) {
  std::mt19937_64 rng(FreshSeed());
  for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{16437}, kMaxMatrixBytes}) {
    v1::EchoRequest req;
    req.set_response_bytes(bytes);
    req.mutable_payload()->resize(size_t(rng() % 40000));
    for (char& c : *req.mutable_payload()) c = char(rng());
    grpc::ClientContext ctx;
    v1::EchoResponse resp;
    const grpc::Status s = stub_->Echo(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << bytes << ": " << s.error_message();
    EXPECT_EQ(int64_t(resp.payload().size()), bytes);
    EXPECT_EQ(resp.payload().find_first_not_of('\0'), std::string::npos) << bytes;
  }
  struct Bad {
    int64_t bytes;
    grpc::StatusCode code;
    const char* says;
  };
  for (const Bad& bad :
       {Bad{-1, grpc::INVALID_ARGUMENT, "response_bytes: -1 is negative"},
        Bad{kMaxMatrixBytes + 1, grpc::RESOURCE_EXHAUSTED, "--max_matrix_bytes"}}) {
    v1::EchoRequest req;
    req.set_response_bytes(bad.bytes);
    grpc::ClientContext ctx;
    v1::EchoResponse resp;
    const grpc::Status s = stub_->Echo(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), bad.code) << bad.bytes << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(bad.says), std::string::npos) << s.error_message();
  }
  grpc::ClientContext info_ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub_->GetServerInfo(&info_ctx, {}, &info).ok());
}

TEST_F(CpuServerTest, HealthServing) {
  auto health = grpc::health::v1::Health::NewStub(Connect(server_->target()));
  for (const char* service : {"", "gpucompute.v1.Compute"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
}

TEST_F(CpuServerTest, ReflectionListsServices) {
  auto reflection =
      grpc::reflection::v1alpha::ServerReflection::NewStub(Connect(server_->target()));
  grpc::ClientContext ctx;
  auto stream = reflection->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest req;
  req.set_list_services("");
  ASSERT_TRUE(stream->Write(req));
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  std::set<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.insert(s.name());
  EXPECT_TRUE(names.count("gpucompute.v1.Compute"));
  EXPECT_TRUE(names.count("grpc.health.v1.Health"));
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(CpuServerTest, ThirtyTwoConcurrentClientsWithMixedRequests) {
  const auto failures = testing::RunMixedClients(server_->target(), 32, 6, 70, seed_);
  EXPECT_TRUE(failures.empty()) << failures.front() << " (" << failures.size()
                                << " clients failed, " << SeedNote() << ")";
}

// A server with one worker and a queue of one: a burst overflows it.
TEST(CpuServerAdmission, FullQueueGetsResourceExhausted) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--backend=cpu", "--cpu_workers=1", "--max_queue_depth=1"});
  ASSERT_TRUE(server.started());
  std::mt19937_64 rng(FreshSeed());
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(400, 400, rng);
  *req.mutable_b() = RandomMatrix<float>(400, 400, rng);
  std::vector<std::future<grpc::StatusCode>> calls;
  for (int i = 0; i < 12; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      auto stub = v1::Compute::NewStub(Connect(server.target()));
      grpc::ClientContext ctx;
      v1::MatMulResponse resp;
      return stub->MatMul(&ctx, req, &resp).error_code();
    }));
  }
  int ok = 0, exhausted = 0;
  for (auto& f : calls) {
    const grpc::StatusCode code = f.get();
    ok += code == grpc::OK;
    exhausted += code == grpc::RESOURCE_EXHAUSTED;
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(ok + exhausted, 12);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// SIGTERM: the in-flight request completes, new ones are refused, exit 0.
TEST(CpuServerShutdown, DrainsInFlightWorkAndExitsZero) {
  testing::ServerWithMetrics started =
      testing::StartServerWithMetrics(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--cpu_workers=1"});
  ASSERT_TRUE(started.started());
  ServerProcess& server = *started.process;
  std::mt19937_64 rng(FreshSeed());
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(1000, 1000, rng);
  *req.mutable_b() = RandomMatrix<float>(1000, 1000, rng);
  auto in_flight = std::async(std::launch::async, [&] {
    auto stub = v1::Compute::NewStub(Connect(server.target()));
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    const grpc::Status s = stub->MatMul(&ctx, req, &resp);
    return s.ok() && resp.c().data().size() == size_t{1000 * 1000 * 4};
  });
  // The signal comes once the call has reached its handler, however slow
  // the machine (a sanitizer build, say).
  for (int i = 0; i < 3000; ++i) {
    auto scrape = testing::ScrapeMetrics(started.metrics_port);
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    if (scrape->Sum("gpucompute_requests_in_flight") +
            scrape->Sum("gpucompute_requests_total", {{"op", "matmul"}}) >=
        1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string target = server.target();
  EXPECT_EQ(server.Stop(SIGTERM), 0);
  EXPECT_TRUE(in_flight.get());
  auto stub = v1::Compute::NewStub(Connect(target));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  v1::ServerInfo info;
  EXPECT_EQ(stub->GetServerInfo(&ctx, {}, &info).error_code(), grpc::UNAVAILABLE);
}

// MIN and MAX propagate NaN as NumPy's min/max do, SUM and MEAN follow IEEE
// arithmetic (docs/contract.md, Numerics): x = [[nan, 1], [2, inf]] sent
// over gRPC in both dtypes, each result compared with what NumPy gives for
// np.min(x), np.min(x, axis=1), np.min(x, axis=0), and so on.
TEST_F(CpuServerTest, ReduceNaNAndInfinityFollowNumPy) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  struct Want {
    v1::ReduceOp op;
    v1::ReduceAxis axis;
    int64_t rows, cols;
    std::vector<double> out;
  };
  const Want wants[] = {
      {v1::REDUCE_OP_MIN, v1::REDUCE_AXIS_ALL, 1, 1, {nan}},
      {v1::REDUCE_OP_MIN, v1::REDUCE_AXIS_PER_ROW, 2, 1, {nan, 2}},
      {v1::REDUCE_OP_MIN, v1::REDUCE_AXIS_PER_COLUMN, 1, 2, {nan, 1}},
      {v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_ALL, 1, 1, {nan}},
      {v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_PER_ROW, 2, 1, {nan, inf}},
      {v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_PER_COLUMN, 1, 2, {nan, inf}},
      {v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL, 1, 1, {nan}},
      {v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_PER_ROW, 2, 1, {nan, inf}},
      {v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_PER_COLUMN, 1, 2, {nan, inf}},
      {v1::REDUCE_OP_MEAN, v1::REDUCE_AXIS_ALL, 1, 1, {nan}},
      {v1::REDUCE_OP_MEAN, v1::REDUCE_AXIS_PER_ROW, 2, 1, {nan, inf}},
      {v1::REDUCE_OP_MEAN, v1::REDUCE_AXIS_PER_COLUMN, 1, 2, {nan, inf}},
  };
  for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64}) {
    const bool f32 = dtype == v1::DTYPE_FLOAT32;
    v1::Matrix input;
    input.set_dtype(dtype);
    input.set_rows(2);
    input.set_cols(2);
    if (f32) {
      const float x[] = {std::numeric_limits<float>::quiet_NaN(), 1.f, 2.f,
                         std::numeric_limits<float>::infinity()};
      input.set_data(x, sizeof x);
    } else {
      const double x[] = {nan, 1.0, 2.0, inf};
      input.set_data(x, sizeof x);
    }
    for (const Want& w : wants) {
      SCOPED_TRACE(std::string(f32 ? "float32 " : "float64 ") + v1::ReduceOp_Name(w.op) + " " +
                   v1::ReduceAxis_Name(w.axis));
      v1::ReduceRequest req;
      *req.mutable_input() = input;
      req.set_op(w.op);
      req.set_axis(w.axis);
      grpc::ClientContext ctx;
      v1::ReduceResponse resp;
      const grpc::Status s = stub_->Reduce(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(resp.output().dtype(), dtype);
      ASSERT_EQ(resp.output().rows(), w.rows);
      ASSERT_EQ(resp.output().cols(), w.cols);
      const size_t elem = f32 ? 4 : 8;
      ASSERT_EQ(resp.output().data().size(), w.out.size() * elem);
      for (size_t i = 0; i < w.out.size(); ++i) {
        double got;
        if (f32) {
          float f;
          std::memcpy(&f, resp.output().data().data() + i * elem, sizeof f);
          got = f;
        } else {
          std::memcpy(&got, resp.output().data().data() + i * elem, sizeof got);
        }
        if (std::isnan(w.out[i])) {
          EXPECT_TRUE(std::isnan(got)) << "element " << i << ": got " << got << ", NumPy gives nan";
        } else {
          EXPECT_EQ(got, w.out[i]) << "element " << i;
        }
      }
    }
  }
}

// The server runs on the allocator it was built with: jemalloc in a release
// build. glibc's one-arena malloc made every thread's allocations queue on
// one lock, the first cap on small requests per second; a link that drops
// jemalloc (an --as-needed linker, say) would bring it back unnoticed.
TEST(ServerAllocator, TheServerRunsOnTheAllocatorItWasBuiltWith) {
  const std::string want = GPUCOMPUTE_SERVER_ALLOCATOR;
  const testing::CommandResult r =
      testing::RunCommand(absl::StrCat("timeout -s TERM 3 ", GPUCOMPUTE_SERVER_PATH,
                                       " --backend=cpu --listen=127.0.0.1:0 --metrics_listen="));
  EXPECT_NE(r.output.find("host memory: " + want), std::string::npos)
      << "built with " << want << ":\n"
      << r.output;
}

}  // namespace
}  // namespace gpucompute
