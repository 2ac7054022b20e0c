// End to end over loopback, CPU backend: matrices that stay on the server.
// Upload in 1-byte, odd and large messages, Download, ops on tensors, kept
// outputs and a chain of 100 kept ops that moves no matrix bytes, every
// Part 2 status row this server can reach, a cancelled upload and a dropped
// connection that hold nothing, expiry with no traffic, release while in
// use, the budget running out and recovering, 32 concurrent clients, and a
// payload larger than one gRPC message may be. Results are checked against
// the float64 reference.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/sanitizers.h"
#include "support/server_process.h"
#include "support/tensor_client.h"
#include "support/test_util.h"

extern char** environ;

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::DownloadBytes;
using testing::ListTensors;
using testing::ReleaseTensors;
using testing::SetDeadline;
using testing::TensorMatrix;
using testing::UploadBytes;
using testing::WaitForHeld;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr char kInstance[] = "tensor-test-a";

template <typename T>
std::string RandomBytes(int64_t count, std::mt19937_64& rng) {
  std::vector<T> v = testing::RandomValues<T>(count, rng);
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

v1::Matrix InlineMatrix(v1::DType dtype, int64_t rows, int64_t cols, const std::string& bytes) {
  v1::Matrix m;
  m.set_dtype(dtype);
  m.set_rows(rows);
  m.set_cols(cols);
  m.set_data(bytes);
  return m;
}

kernels::Problem MatMulProblem(kernels::DType dtype, int64_t m, int64_t k, int64_t n) {
  kernels::Problem p;
  p.op = kernels::Op::kMatMul;
  p.dtype = dtype;
  p.m = m;
  p.k = k;
  p.n = n;
  return p;
}

kernels::Problem UnaryProblem(kernels::Op op, kernels::DType dtype, int64_t m, int64_t n) {
  kernels::Problem p;
  p.op = op;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  return p;
}

// max |got - ref| / max(1, max |ref|) of a payload against a reference.
double ErrorOf(v1::DType dtype, int64_t rows, int64_t cols, const std::string& bytes,
               const std::vector<double>& ref) {
  return testing::MaxError(InlineMatrix(dtype, rows, cols, bytes), ref);
}

bool IsTensorId(const std::string& id, const std::string& instance) {
  const size_t at = id.find('@');
  if (at != 32 || id.substr(at + 1) != instance) return false;
  for (size_t i = 0; i < at; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(id[i]))) return false;
  }
  return true;
}

// A well-formed id of this instance that was never handed out.
std::string UnknownId() { return std::string(32, '0') + "@" + kInstance; }

#define EXPECT_CODE(status, code, needle)                                                \
  do {                                                                                   \
    const grpc::Status s_ = (status);                                                    \
    EXPECT_EQ(s_.error_code(), grpc::StatusCode::code) << s_.error_message();            \
    EXPECT_NE(s_.error_message().find(needle), std::string::npos) << s_.error_message(); \
  } while (0)

class TensorServerTest : public testing::SeededStubTest {
 protected:
  static constexpr int64_t kBudget = 768 * kMiB;
  static constexpr int64_t kMaxMatrixBytes = 64 * kMiB;

  static void SetUpTestSuite() {
    server_ = new testing::ServerWithMetrics(testing::StartServerWithMetrics(
        GPUCOMPUTE_SERVER_PATH,
        {testing::BackendFlag(), "--cpu_workers=4", absl::StrCat("--instance_name=", kInstance),
         absl::StrCat("--tensor_memory_bytes=", kBudget),
         absl::StrCat("--max_matrix_bytes=", kMaxMatrixBytes)}));
    ASSERT_TRUE(server_->started()) << "server did not start";
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ConnectTo(server_->process->target());
  }
  // Each test leaves nothing held behind.
  void TearDown() override {
    EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 0; }))
        << "held bytes at the end: " << ListTensors(*stub_).held_bytes();
  }

  v1::TensorInfo MustUpload(v1::DType dtype, int64_t rows, int64_t cols, const std::string& bytes,
                            std::vector<int64_t> chunks = {4 * kMiB}) {
    v1::TensorInfo info;
    grpc::Status s = UploadBytes(*stub_, dtype, rows, cols, bytes, chunks, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  std::string MustDownload(const std::string& id, bool release = true) {
    std::string bytes;
    grpc::Status s = DownloadBytes(*stub_, id, &bytes, 0, release);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return bytes;
  }

  static testing::ServerWithMetrics* server_;
};
testing::ServerWithMetrics* TensorServerTest::server_ = nullptr;

TEST_F(TensorServerTest, ServerInfoShowsTheBudgetLifetimeAndInstance) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
  EXPECT_EQ(info.tensor_memory_bytes(), kBudget);
  EXPECT_EQ(info.tensor_ttl_seconds(), 600);  // --tensor_ttl's default, 10 min
  EXPECT_EQ(info.instance_name(), kInstance);
  EXPECT_FALSE(info.shared_memory_allowed());
}

TEST_F(TensorServerTest, RoundTripInOneByteOddAndLargeMessages) {
  struct Case {
    v1::DType dtype;
    int64_t rows, cols;
    std::vector<int64_t> chunks;
    int64_t download_chunk;
  };
  const std::vector<Case> cases = {
      {v1::DTYPE_FLOAT64, 7, 5, {1}, 1},                        // 280 one-byte messages each way
      {v1::DTYPE_FLOAT32, 301, 257, {4099, 1, 65537}, 12345},   // odd sizes, odd chunks
      {v1::DTYPE_FLOAT32, 1024, 2048, {3 * kMiB + 5}, 0},       // default download chunks
      {v1::DTYPE_FLOAT64, 4096, 2048, {64 * kMiB}, 64 * kMiB},  // one 64 MiB message each way
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.rows, "x", c.cols, " dtype ", c.dtype, " ", SeedNote()));
    const int64_t es = c.dtype == v1::DTYPE_FLOAT32 ? 4 : 8;
    const std::string bytes = c.dtype == v1::DTYPE_FLOAT32
                                  ? RandomBytes<float>(c.rows * c.cols, rng_)
                                  : RandomBytes<double>(c.rows * c.cols, rng_);
    const v1::TensorInfo info = MustUpload(c.dtype, c.rows, c.cols, bytes, c.chunks);
    EXPECT_TRUE(IsTensorId(info.id(), kInstance)) << info.id();
    EXPECT_EQ(info.dtype(), c.dtype);
    EXPECT_EQ(info.rows(), c.rows);
    EXPECT_EQ(info.cols(), c.cols);
    EXPECT_EQ(info.bytes(), c.rows * c.cols * es);
    EXPECT_TRUE(absl::StartsWith(info.device(), testing::TestBackend())) << info.device();
    EXPECT_EQ(info.server(), kInstance);
    EXPECT_GT(info.expires_unix_ms(), absl::ToUnixMillis(absl::Now()));

    std::string back;
    v1::TensorInfo first;
    int messages = 0;
    grpc::Status s =
        DownloadBytes(*stub_, info.id(), &back, c.download_chunk, true, &first, &messages);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(back == bytes) << "the payload came back different";
    EXPECT_EQ(first.id(), info.id());
    EXPECT_EQ(first.bytes(), info.bytes());
    const int64_t chunk = c.download_chunk > 0 ? c.download_chunk : (4 * kMiB - 64 * 1024);
    EXPECT_EQ(messages, (info.bytes() + chunk - 1) / chunk);
  }
}

TEST_F(TensorServerTest, TensorIdsAreUniqueAndCarry128RandomBits) {
  std::set<std::string> ids;
  std::vector<std::string> all;
  for (int i = 0; i < 64; ++i) {
    const v1::TensorInfo info = MustUpload(v1::DTYPE_FLOAT32, 1, 1, std::string(4, '\0'));
    EXPECT_TRUE(IsTensorId(info.id(), kInstance)) << info.id();
    ids.insert(info.id());
    all.push_back(info.id());
  }
  EXPECT_EQ(ids.size(), 64u);
  EXPECT_EQ(ReleaseTensors(*stub_, all).released(), 64);
}

TEST_F(TensorServerTest, OpsOnTensorsMatchTheReferenceAndUploadNothing) {
  const int64_t m = 67, k = 45, n = 33;
  const std::string a = RandomBytes<float>(m * k, rng_), b = RandomBytes<float>(k * n, rng_);
  const v1::TensorInfo ta = MustUpload(v1::DTYPE_FLOAT32, m, k, a);
  const v1::TensorInfo tb = MustUpload(v1::DTYPE_FLOAT32, k, n, b);
  const auto ref = kernels::ReferenceResult(MatMulProblem(kernels::DType::kFloat32, m, k, n),
                                            a.data(), b.data());
  // Both operands tensors; one tensor and one inline (either side).
  for (int mix = 0; mix < 3; ++mix) {
    SCOPED_TRACE(absl::StrCat("mix ", mix, " ", SeedNote()));
    v1::MatMulRequest req;
    *req.mutable_a() = mix == 2 ? InlineMatrix(v1::DTYPE_FLOAT32, m, k, a) : TensorMatrix(ta.id());
    *req.mutable_b() = mix == 1 ? InlineMatrix(v1::DTYPE_FLOAT32, k, n, b) : TensorMatrix(tb.id());
    grpc::ClientContext ctx;
    v1::MatMulResponse resp;
    grpc::Status s = stub_->MatMul(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_LE(testing::MaxError(resp.c(), ref), 1e-4);
    // Only an inline operand goes up (a GPU reports its copy; the CPU none).
    if (mix == 0) {
      EXPECT_EQ(resp.report().upload_us(), 0);
    }
  }
  // The Matrix may repeat the tensor's own dtype and shape.
  v1::TransposeRequest t;
  *t.mutable_input() = TensorMatrix(ta.id());
  t.mutable_input()->set_dtype(v1::DTYPE_FLOAT32);
  t.mutable_input()->set_rows(m);
  t.mutable_input()->set_cols(k);
  grpc::ClientContext ctx;
  v1::TransposeResponse tr;
  ASSERT_TRUE(stub_->Transpose(&ctx, t, &tr).ok());
  EXPECT_EQ(testing::MaxError(tr.output(),
                              kernels::ReferenceResult(UnaryProblem(kernels::Op::kTranspose,
                                                                    kernels::DType::kFloat32, m, k),
                                                       a.data(), nullptr)),
            0);
  EXPECT_EQ(ReleaseTensors(*stub_, {ta.id(), tb.id()}).released(), 2);
}

TEST_F(TensorServerTest, KeptOutputCarriesATensorIdAndDownloadsCorrect) {
  const int64_t rows = 129, cols = 77;
  const std::string x = RandomBytes<double>(rows * cols, rng_);
  const v1::TensorInfo tx = MustUpload(v1::DTYPE_FLOAT64, rows, cols, x);
  v1::ReduceRequest req;
  *req.mutable_input() = TensorMatrix(tx.id());
  req.set_op(v1::REDUCE_OP_MAX);
  req.set_axis(v1::REDUCE_AXIS_PER_ROW);
  req.mutable_output()->set_keep(true);
  req.mutable_output()->set_ttl_seconds(3600);
  grpc::ClientContext ctx;
  v1::ReduceResponse resp;
  ASSERT_TRUE(stub_->Reduce(&ctx, req, &resp).ok());
  const v1::Matrix& out = resp.output();
  ASSERT_EQ(out.payload_case(), v1::Matrix::kTensorId);
  EXPECT_TRUE(IsTensorId(out.tensor_id(), kInstance));
  EXPECT_EQ(out.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(out.rows(), rows);
  EXPECT_EQ(out.cols(), 1);
  EXPECT_EQ(resp.report().download_us(), 0);
  // Listed with its own lifetime (an hour, not the default ten minutes).
  bool listed = false;
  const v1::ListTensorsResponse all = ListTensors(*stub_);
  for (const auto& t : all.tensors()) {
    if (t.id() != out.tensor_id()) continue;
    listed = true;
    EXPECT_GT(t.expires_unix_ms(), absl::ToUnixMillis(absl::Now() + absl::Minutes(50)));
  }
  EXPECT_TRUE(listed);
  kernels::Problem p = UnaryProblem(kernels::Op::kReduce, kernels::DType::kFloat64, rows, cols);
  p.reduce_op = kernels::ReduceOp::kMax;
  p.reduce_axis = kernels::ReduceAxis::kPerRow;
  EXPECT_EQ(ErrorOf(v1::DTYPE_FLOAT64, rows, 1, MustDownload(out.tensor_id()),
                    kernels::ReferenceResult(p, x.data(), nullptr)),
            0);
  EXPECT_EQ(ReleaseTensors(*stub_, {tx.id()}).released(), 1);
}

// 33 rounds of X <- (X M)^T, each also reducing X, plus a last reduce: 100
// ops on kept tensors. No response carries matrix bytes and every report
// shows no upload and no download; the final tensors match float64.
TEST_F(TensorServerTest, AChainOfHundredKeptOpsMovesNoMatrixBytes) {
  const int64_t n = 24;
  std::vector<double> mv(n * n), xv(n * n);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (double& v : mv) v = dist(rng_) / std::sqrt(double(n));
  for (double& v : xv) v = dist(rng_);
  auto bytes_of = [](const std::vector<double>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  };
  const std::string mid = MustUpload(v1::DTYPE_FLOAT64, n, n, bytes_of(mv)).id();
  std::string xid = MustUpload(v1::DTYPE_FLOAT64, n, n, bytes_of(xv)).id();

  int ops = 0;
  auto check = [&ops](const v1::Matrix& out, const v1::ExecutionReport& report) {
    ++ops;
    EXPECT_EQ(out.payload_case(), v1::Matrix::kTensorId) << "op " << ops;
    EXPECT_TRUE(out.data().empty());
    EXPECT_EQ(report.upload_us(), 0) << "op " << ops;
    EXPECT_EQ(report.download_us(), 0) << "op " << ops;
    return out.tensor_id();
  };
  auto reduce = [&](const std::string& id) {
    v1::ReduceRequest req;
    *req.mutable_input() = TensorMatrix(id);
    req.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
    req.mutable_output()->set_keep(true);
    grpc::ClientContext ctx;
    v1::ReduceResponse resp;
    grpc::Status s = stub_->Reduce(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return check(resp.output(), resp.report());
  };
  std::string rid;
  for (int round = 0; round < 33; ++round) {
    v1::MatMulRequest mm;
    *mm.mutable_a() = TensorMatrix(xid);
    *mm.mutable_b() = TensorMatrix(mid);
    mm.mutable_output()->set_keep(true);
    grpc::ClientContext c1;
    v1::MatMulResponse r1;
    ASSERT_TRUE(stub_->MatMul(&c1, mm, &r1).ok());
    const std::string yid = check(r1.c(), r1.report());
    v1::TransposeRequest tr;
    *tr.mutable_input() = TensorMatrix(yid);
    tr.mutable_output()->set_keep(true);
    grpc::ClientContext c2;
    v1::TransposeResponse r2;
    ASSERT_TRUE(stub_->Transpose(&c2, tr, &r2).ok());
    const std::string zid = check(r2.output(), r2.report());
    if (!rid.empty()) ReleaseTensors(*stub_, {rid});
    rid = reduce(zid);
    EXPECT_EQ(ReleaseTensors(*stub_, {xid, yid}).released(), 2);
    xid = zid;
    // The float64 reference of the round.
    std::vector<double> y(n * n, 0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < n; ++l) y[i * n + j] += xv[i * n + l] * mv[l * n + j];
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) xv[j * n + i] = y[i * n + j];
  }
  ReleaseTensors(*stub_, {rid});
  rid = reduce(xid);
  EXPECT_EQ(ops, 100);

  std::vector<double> col_sums(n, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) col_sums[j] += xv[i * n + j];
  EXPECT_LE(ErrorOf(v1::DTYPE_FLOAT64, n, n, MustDownload(xid), xv), 1e-10);
  EXPECT_LE(ErrorOf(v1::DTYPE_FLOAT64, 1, n, MustDownload(rid), col_sums), 1e-10);
  EXPECT_EQ(ReleaseTensors(*stub_, {mid}).released(), 1);
}

TEST_F(TensorServerTest, UnknownReleasedMalformedAndForeignIdsAreNotFound) {
  const v1::TensorInfo t = MustUpload(v1::DTYPE_FLOAT32, 2, 2, std::string(16, '\0'));
  EXPECT_EQ(ReleaseTensors(*stub_, {t.id()}).released(), 1);
  EXPECT_EQ(ReleaseTensors(*stub_, {t.id()}).released(), 0);  // idempotent
  std::string bytes;
  EXPECT_CODE(DownloadBytes(*stub_, t.id(), &bytes), NOT_FOUND, t.id());
  EXPECT_CODE(DownloadBytes(*stub_, UnknownId(), &bytes), NOT_FOUND, UnknownId());
  EXPECT_CODE(DownloadBytes(*stub_, "not-an-id", &bytes), NOT_FOUND, "not-an-id");
  const std::string foreign = std::string(32, 'a') + "@replica-b:50051";
  EXPECT_CODE(DownloadBytes(*stub_, foreign, &bytes), NOT_FOUND,
              "held by instance \"replica-b:50051\"");

  v1::TransposeRequest tr;
  *tr.mutable_input() = TensorMatrix(t.id());
  grpc::ClientContext c1;
  v1::TransposeResponse r1;
  EXPECT_CODE(stub_->Transpose(&c1, tr, &r1), NOT_FOUND, "input.tensor_id");
  v1::MatMulRequest mm;
  *mm.mutable_a() = InlineMatrix(v1::DTYPE_FLOAT32, 1, 1, std::string(4, '\0'));
  *mm.mutable_b() = TensorMatrix(foreign);
  grpc::ClientContext c2;
  v1::MatMulResponse r2;
  EXPECT_CODE(stub_->MatMul(&c2, mm, &r2), NOT_FOUND, "b.tensor_id");
}

TEST_F(TensorServerTest, MatrixFieldsBesideATensorIdMustMatchIt) {
  const v1::TensorInfo t = MustUpload(v1::DTYPE_FLOAT32, 3, 4, std::string(48, '\0'));
  auto transpose = [&](void (*edit)(v1::Matrix*)) {
    v1::TransposeRequest req;
    *req.mutable_input() = TensorMatrix(t.id());
    edit(req.mutable_input());
    grpc::ClientContext ctx;
    v1::TransposeResponse resp;
    return stub_->Transpose(&ctx, req, &resp);
  };
  EXPECT_CODE(transpose([](v1::Matrix* m) { m->set_dtype(v1::DTYPE_FLOAT64); }), INVALID_ARGUMENT,
              "input.dtype");
  EXPECT_CODE(transpose([](v1::Matrix* m) { m->set_rows(4); }), INVALID_ARGUMENT, "input.rows: 4");
  EXPECT_CODE(transpose([](v1::Matrix* m) { m->set_cols(3); }), INVALID_ARGUMENT, "input.cols: 3");
  EXPECT_TRUE(transpose([](v1::Matrix* m) { m->set_rows(3); }).ok());
  EXPECT_EQ(ReleaseTensors(*stub_, {t.id()}).released(), 1);
}

TEST_F(TensorServerTest, RequestShapeRowsOfThePart2Table) {
  // A Matrix with no payload while rows * cols > 0.
  v1::TransposeRequest empty;
  empty.mutable_input()->set_dtype(v1::DTYPE_FLOAT32);
  empty.mutable_input()->set_rows(2);
  empty.mutable_input()->set_cols(3);
  grpc::ClientContext c1;
  v1::TransposeResponse r1;
  EXPECT_CODE(stub_->Transpose(&c1, empty, &r1), INVALID_ARGUMENT, "input.data");

  // keep and shared_memory in one placement; a negative lifetime.
  v1::TransposeRequest both;
  *both.mutable_input() = InlineMatrix(v1::DTYPE_FLOAT32, 1, 1, std::string(4, '\0'));
  both.mutable_output()->set_keep(true);
  both.mutable_output()->mutable_shared_memory()->set_region("r");
  grpc::ClientContext c2;
  EXPECT_CODE(stub_->Transpose(&c2, both, &r1), INVALID_ARGUMENT, "keep and shared_memory");
  v1::TransposeRequest ttl;
  *ttl.mutable_input() = both.input();
  ttl.mutable_output()->set_keep(true);
  ttl.mutable_output()->set_ttl_seconds(-5);
  grpc::ClientContext c3;
  EXPECT_CODE(stub_->Transpose(&c3, ttl, &r1), INVALID_ARGUMENT, "output.ttl_seconds");
  ttl.mutable_output()->set_ttl_seconds(86401);  // a day and a second: past --max_tensor_ttl
  grpc::ClientContext c_long;
  EXPECT_CODE(stub_->Transpose(&c_long, ttl, &r1), INVALID_ARGUMENT,
              "output.ttl_seconds: at most 86400 (--max_tensor_ttl), got 86401");

  // Shared memory without --allow_shared_memory, as an input and as an output.
  v1::TransposeRequest shm_in;
  shm_in.mutable_input()->set_dtype(v1::DTYPE_FLOAT32);
  shm_in.mutable_input()->set_rows(1);
  shm_in.mutable_input()->set_cols(1);
  shm_in.mutable_input()->mutable_shared_memory()->set_region("r");
  grpc::ClientContext c4;
  EXPECT_CODE(stub_->Transpose(&c4, shm_in, &r1), FAILED_PRECONDITION, "--allow_shared_memory");
  v1::TransposeRequest shm_out;
  *shm_out.mutable_input() = both.input();
  shm_out.mutable_output()->mutable_shared_memory()->set_region("r");
  grpc::ClientContext c5;
  EXPECT_CODE(stub_->Transpose(&c5, shm_out, &r1), FAILED_PRECONDITION, "--allow_shared_memory");
  grpc::ClientContext c6;
  v1::SharedMemoryRegion region;
  EXPECT_CODE(stub_->RegisterSharedMemory(&c6, {}, &region), FAILED_PRECONDITION,
              "--allow_shared_memory");
  grpc::ClientContext c7;
  v1::DownloadRequest dl;
  dl.set_tensor_id(UnknownId());
  dl.mutable_shared_memory()->set_region("r");
  auto reader = stub_->Download(&c7, dl);
  v1::DownloadResponse ignored;
  while (reader->Read(&ignored)) {
  }
  EXPECT_CODE(reader->Finish(), FAILED_PRECONDITION, "--allow_shared_memory");

  // Download: a negative chunk size.
  std::string bytes;
  EXPECT_CODE(
      testing::DownloadTo(*stub_, UnknownId(), -1, false, [](int64_t, const std::string&) {}),
      INVALID_ARGUMENT, "chunk_bytes");
}

// Sends the given messages as one Upload and returns its status.
grpc::Status UploadMessages(v1::Compute::Stub& stub,
                            const std::vector<v1::UploadRequest>& messages) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 60);
  v1::TensorInfo info;
  auto writer = stub.Upload(&ctx, &info);
  for (const auto& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

v1::UploadRequest First(int dtype, int64_t rows, int64_t cols, std::string data) {
  v1::UploadRequest r;
  r.set_dtype(static_cast<v1::DType>(dtype));
  r.set_rows(rows);
  r.set_cols(cols);
  r.set_data(std::move(data));
  return r;
}

v1::UploadRequest Data(std::string data) {
  v1::UploadRequest r;
  r.set_data(std::move(data));
  return r;
}

TEST_F(TensorServerTest, UploadRowsOfThePart2Table) {
  EXPECT_CODE(UploadMessages(*stub_, {}), INVALID_ARGUMENT, "first message");
  EXPECT_CODE(UploadMessages(*stub_, {First(0, 2, 2, "")}), INVALID_ARGUMENT, "dtype");
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 0, 2, "")}), INVALID_ARGUMENT,
              "rows");
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 2, -1, "")}), INVALID_ARGUMENT,
              "cols");
  EXPECT_CODE(
      UploadMessages(*stub_, {First(v1::DTYPE_FLOAT64, int64_t{1} << 40, int64_t{1} << 40, "")}),
      INVALID_ARGUMENT, "overflows int64");
  // Too few bytes, too many (at once and over several messages).
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 2, 2, std::string(8, 'x')),
                                      Data(std::string(7, 'x'))}),
              INVALID_ARGUMENT, "only 15");
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 2, 2, std::string(17, 'x'))}),
              INVALID_ARGUMENT, "16 bytes");
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 2, 2, std::string(8, 'x')),
                                      Data(std::string(8, 'x')), Data("x")}),
              INVALID_ARGUMENT, "more than 17");
  // data and shared_memory in one Upload; shared_memory alone; a later
  // message that repeats the shape.
  v1::UploadRequest mixed = First(v1::DTYPE_FLOAT32, 1, 1, "abcd");
  mixed.mutable_shared_memory()->set_region("r");
  EXPECT_CODE(UploadMessages(*stub_, {mixed}), INVALID_ARGUMENT, "both data and shared_memory");
  v1::UploadRequest shm = First(v1::DTYPE_FLOAT32, 1, 1, "");
  shm.mutable_shared_memory()->set_region("r");
  EXPECT_CODE(UploadMessages(*stub_, {shm}), FAILED_PRECONDITION, "--allow_shared_memory");
  v1::UploadRequest later = First(v1::DTYPE_FLOAT32, 2, 2, "");
  later.set_data(std::string(8, 'x'));
  EXPECT_CODE(UploadMessages(*stub_, {First(v1::DTYPE_FLOAT32, 2, 2, std::string(8, 'x')), later}),
              INVALID_ARGUMENT, "data only");
  v1::UploadRequest negative = First(v1::DTYPE_FLOAT32, 1, 1, "abcd");
  negative.set_ttl_seconds(-1);
  EXPECT_CODE(UploadMessages(*stub_, {negative}), INVALID_ARGUMENT, "ttl_seconds");
  v1::UploadRequest forever = First(v1::DTYPE_FLOAT32, 1, 1, "abcd");
  forever.set_ttl_seconds(int64_t{1} << 62);
  EXPECT_CODE(UploadMessages(*stub_, {forever}), INVALID_ARGUMENT,
              "ttl_seconds: at most 86400 (--max_tensor_ttl)");
  // None of these holds anything (TearDown checks the bytes).
  EXPECT_EQ(ListTensors(*stub_).tensors_size(), 0);
}

// Messages the server reads as raw bytes: one that is not an UploadRequest
// at all is INVALID_ARGUMENT naming its place in the stream.
TEST_F(TensorServerTest, AMalformedUploadMessageIsInvalidArgumentNamingIt) {
  auto channel = testing::Connect(server_->process->target());
  const grpc::internal::RpcMethod method("/gpucompute.v1.Compute/Upload",
                                         grpc::internal::RpcMethod::CLIENT_STREAMING, channel);
  for (const std::vector<std::string>& stream :
       {std::vector<std::string>{std::string("\x08", 1)},  // a varint cut short
        std::vector<std::string>{
            First(v1::DTYPE_FLOAT32, 2, 2, std::string(8, 'x')).SerializeAsString(),
            std::string("\x2a\x10"
                        "ab",
                        4)}}) {  // data longer than sent
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method, &ctx,
                                                                      &response));
    for (const std::string& bytes : stream) {
      grpc::Slice slice(bytes);
      grpc::ByteBuffer message(&slice, 1);
      if (!writer->Write(message)) break;
    }
    writer->WritesDone();
    EXPECT_CODE(writer->Finish(), INVALID_ARGUMENT,
                absl::StrCat("Upload message ", stream.size(), ": not a valid protobuf message"));
  }
  EXPECT_EQ(ListTensors(*stub_).tensors_size(), 0);
}

TEST_F(TensorServerTest, ACancelledUploadHoldsNothing) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, 60);
  v1::TensorInfo info;
  auto writer = stub_->Upload(&ctx, &info);
  ASSERT_TRUE(writer->Write(First(v1::DTYPE_FLOAT32, 4096, 4096, std::string(kMiB, 'x'))));
  ASSERT_TRUE(writer->Write(Data(std::string(kMiB, 'y'))));
  // The tensor exists (its 64 MiB are charged) before the upload ends.
  EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 64 * kMiB; }));
  ctx.TryCancel();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 0; }));
  EXPECT_EQ(ListTensors(*stub_).tensors_size(), 0);
}

// Run in a child process by the test below: starts an Upload, sends part of
// it, and waits to be killed, which drops its connection mid-stream.
TEST(TensorHelper, DISABLED_UploadPartThenWaitToBeKilled) {
  const char* target = std::getenv("GPUCOMPUTE_TENSOR_TEST_TARGET");
  ASSERT_NE(target, nullptr);
  auto stub = v1::Compute::NewStub(Connect(target));
  grpc::ClientContext ctx;
  v1::TensorInfo info;
  auto writer = stub->Upload(&ctx, &info);
  ASSERT_TRUE(writer->Write(First(v1::DTYPE_FLOAT64, 1024, 1024, std::string(kMiB, 'x'))));
  std::this_thread::sleep_for(std::chrono::seconds(120));
}

TEST_F(TensorServerTest, ADroppedConnectionHoldsNothing) {
  const std::string filter = "--gtest_filter=TensorHelper.DISABLED_UploadPartThenWaitToBeKilled";
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests", filter};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = {
      absl::StrCat("GPUCOMPUTE_TENSOR_TEST_TARGET=", server_->process->target())};
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t child = -1;
  ASSERT_EQ(posix_spawn(&child, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()), 0);
  EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 8 * kMiB; }))
      << "the child's upload never began";
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 0; }));
  EXPECT_EQ(ListTensors(*stub_).tensors_size(), 0);
}

TEST_F(TensorServerTest, AReleaseDuringAnOpFreesTheTensorWhenTheOpEnds) {
  // Long enough to release during: a GPU's FP64 1024^3 takes milliseconds, the
  // CPU backend's 512^3 a few hundred (1024^3 took 24 s under the sanitizers).
  const int64_t n = testing::TestBackend() == "cpu" ? 512 : 1024;
  const std::string a = RandomBytes<double>(n * n, rng_);
  const v1::TensorInfo ta = MustUpload(v1::DTYPE_FLOAT64, n, n, a);
  auto op = std::async(std::launch::async, [&] {
    v1::MatMulRequest req;
    *req.mutable_a() = TensorMatrix(ta.id());
    *req.mutable_b() = TensorMatrix(ta.id());
    grpc::ClientContext ctx;
    SetDeadline(ctx, 300);
    v1::MatMulResponse resp;
    grpc::Status s = stub_->MatMul(&ctx, req, &resp);
    return std::make_pair(s, resp);
  });
  // Once the op runs, release its only operand.
  bool running = false;
  for (int i = 0; i < 1000 && !running; ++i) {
    auto scrape = testing::ScrapeMetrics(server_->metrics_port);
    running = scrape.ok() && scrape->Sum("gpucompute_requests_running") >= 1;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(running);
  const auto released = ReleaseTensors(*stub_, {ta.id()});
  EXPECT_EQ(released.released(), 1);
  EXPECT_EQ(released.bytes_freed(), n * n * 8);
  const auto listed = ListTensors(*stub_);
  EXPECT_EQ(listed.tensors_size(), 0);
  // Still held while the op reads it (unless the op has just ended).
  const bool done_already = op.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  if (!done_already) {
    EXPECT_EQ(listed.held_bytes(), n * n * 8);
  }
  auto [status, resp] = op.get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  const auto ref = kernels::ReferenceResult(MatMulProblem(kernels::DType::kFloat64, n, n, n),
                                            a.data(), a.data());
  EXPECT_LE(testing::MaxError(resp.c(), ref), 1e-12);
}

// A payload larger than max_matrix_bytes (so larger than one message may
// carry here): uploaded in chunks, reduced and transposed on the server,
// downloaded in chunks; a result it would take a message too large for
// stays on the server only when kept.
TEST_F(TensorServerTest, ATensorLargerThanOneMessageGoesUpIsUsedAndComesDown) {
  const int64_t rows = 3000, cols = 4000;  // 96 MB of float64 > max_matrix_bytes (64 MiB)
  const std::string x = RandomBytes<double>(rows * cols, rng_);
  ASSERT_GT(int64_t(x.size()), kMaxMatrixBytes);
  const v1::TensorInfo tx = MustUpload(v1::DTYPE_FLOAT64, rows, cols, x, {16 * kMiB + 3});

  v1::TransposeRequest inline_out;
  *inline_out.mutable_input() = TensorMatrix(tx.id());
  grpc::ClientContext c1;
  v1::TransposeResponse r1;
  EXPECT_CODE(stub_->Transpose(&c1, inline_out, &r1), RESOURCE_EXHAUSTED, "max_matrix_bytes");

  v1::TransposeRequest kept = inline_out;
  kept.mutable_output()->set_keep(true);
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->Transpose(&c2, kept, &r1).ok());
  const std::string transposed = MustDownload(r1.output().tensor_id());
  EXPECT_EQ(ErrorOf(v1::DTYPE_FLOAT64, cols, rows, transposed,
                    kernels::ReferenceResult(
                        UnaryProblem(kernels::Op::kTranspose, kernels::DType::kFloat64, rows, cols),
                        x.data(), nullptr)),
            0);

  v1::ReduceRequest sum;
  *sum.mutable_input() = TensorMatrix(tx.id());
  sum.set_op(v1::REDUCE_OP_SUM);
  grpc::ClientContext c3;
  v1::ReduceResponse r3;
  ASSERT_TRUE(stub_->Reduce(&c3, sum, &r3).ok());
  kernels::Problem p = UnaryProblem(kernels::Op::kReduce, kernels::DType::kFloat64, rows, cols);
  EXPECT_LE(testing::MaxError(r3.output(), kernels::ReferenceResult(p, x.data(), nullptr)),
            1e-12 * double(rows * cols));
  EXPECT_TRUE(MustDownload(tx.id()) == x);
}

TEST_F(TensorServerTest, ThirtyTwoClientsUploadOperateAndReleaseConcurrently) {
  const uint64_t seed = seed_;
  const std::string target = server_->process->target();
  std::vector<std::future<std::string>> clients;
  for (int c = 0; c < 32; ++c) {
    clients.push_back(std::async(std::launch::async, [c, seed, target]() -> std::string {
      auto stub = v1::Compute::NewStub(Connect(target));
      std::mt19937_64 rng(seed + c);
      for (int round = 0; round < 4; ++round) {
        const int64_t m = 1 + rng() % 150, k = 1 + rng() % 150, n = 1 + rng() % 150;
        const std::string a = RandomBytes<float>(m * k, rng), b = RandomBytes<float>(k * n, rng);
        v1::TensorInfo ta, tb;
        const std::vector<int64_t> chunks = {int64_t(1 + rng() % 5000)};
        grpc::Status s = UploadBytes(*stub, v1::DTYPE_FLOAT32, m, k, a, chunks, &ta);
        if (s.ok()) s = UploadBytes(*stub, v1::DTYPE_FLOAT32, k, n, b, chunks, &tb);
        if (!s.ok()) return absl::StrCat("client ", c, " upload: ", s.error_message());
        v1::MatMulRequest mm;
        *mm.mutable_a() = TensorMatrix(ta.id());
        *mm.mutable_b() = TensorMatrix(tb.id());
        mm.mutable_output()->set_keep(true);
        grpc::ClientContext c1;
        v1::MatMulResponse r1;
        s = stub->MatMul(&c1, mm, &r1);
        if (!s.ok()) return absl::StrCat("client ", c, " matmul: ", s.error_message());
        ReleaseTensors(*stub, {ta.id(), tb.id()});  // while others' ops run
        v1::TransposeRequest tr;
        *tr.mutable_input() = TensorMatrix(r1.c().tensor_id());
        grpc::ClientContext c2;
        v1::TransposeResponse r2;
        s = stub->Transpose(&c2, tr, &r2);
        if (!s.ok()) return absl::StrCat("client ", c, " transpose: ", s.error_message());
        std::string cbytes;
        s = DownloadBytes(*stub, r1.c().tensor_id(), &cbytes, int64_t(1 + rng() % 9000), true);
        if (!s.ok()) return absl::StrCat("client ", c, " download: ", s.error_message());
        const auto ref = kernels::ReferenceResult(MatMulProblem(kernels::DType::kFloat32, m, k, n),
                                                  a.data(), b.data());
        if (ErrorOf(v1::DTYPE_FLOAT32, m, n, cbytes, ref) > 1e-4) {
          return absl::StrCat("client ", c, ": wrong MatMul result");
        }
        std::vector<double> ref_t(ref.size());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) ref_t[j * m + i] = ref[i * n + j];
        if (testing::MaxError(r2.output(), ref_t) > 1e-4) {
          return absl::StrCat("client ", c, ": wrong Transpose result");
        }
      }
      return "";
    }));
  }
  for (auto& f : clients) {
    const std::string error = f.get();
    EXPECT_TRUE(error.empty()) << error << " (" << SeedNote() << ")";
  }
  EXPECT_EQ(ListTensors(*stub_).tensors_size(), 0);
  // A tensor's bytes come back when its last user lets go: a Download that
  // released it holds it until its reactor is done, which may be just after
  // the client has read the end of the stream.
  EXPECT_TRUE(WaitForHeld(*stub_, [](int64_t held) { return held == 0; }))
      << ListTensors(*stub_).held_bytes() << " bytes still held";
}

TEST_F(TensorServerTest, MetricsShowHeldBytesCountAndBudget) {
  const v1::TensorInfo t = MustUpload(v1::DTYPE_FLOAT32, 64, 64, std::string(64 * 64 * 4, '\0'));
  auto scrape = testing::ScrapeMetricsSettled(server_->metrics_port);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->Sum("gpucompute_tensor_held_bytes"), 64 * 64 * 4);
  EXPECT_EQ(scrape->Sum("gpucompute_tensors"), 1);
  EXPECT_EQ(scrape->Sum("gpucompute_tensor_limit_bytes"), double(kBudget));
  EXPECT_TRUE(scrape->Has("gpucompute_tensor_expiries_total"));
  EXPECT_GE(scrape->Sum("gpucompute_requests_total", {{"op", "upload"}, {"code", "OK"}}), 1);
  EXPECT_EQ(ReleaseTensors(*stub_, {t.id()}).released(), 1);
}

// Bytes of memory the kernel says are available now (0 if unknown).
int64_t MemAvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

float ValueAt(int64_t index) {
  return float(int64_t((uint64_t(index) * 2654435761u) % 2001) - 1000) / 1024.0f;
}

// 3 GiB of float32 where the machine has the memory for it (the server holds
// the input and its transpose), else 256 MiB: generated from the index on
// both sides, so the client never holds the payload. Up in 16 MiB messages,
// transposed (kept) and reduced on the server, the transpose down and
// checked element by element. Under AddressSanitizer always 256 MiB: the
// release build takes the 3 GiB, and ASan's checked copies of it took 44 s.
using testing::kAddressSanitizer;
TEST(LargeTensor, UpTransposedReducedAndDown) {
  const bool big = !kAddressSanitizer && MemAvailableBytes() >= (int64_t{16} << 30);
  const int64_t rows = big ? 32768 : 8192, cols = big ? 24576 : 8192, bytes = rows * cols * 4;
  std::printf("%s: %lld x %lld float32, %lld MiB\n",
              big                 ? "3 GiB"
              : kAddressSanitizer ? "smaller (AddressSanitizer)"
                                  : "smaller (memory)",
              (long long)rows, (long long)cols, (long long)(bytes >> 20));
  auto server = testing::StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH,
      {testing::BackendFlag(), absl::StrCat("--tensor_memory_bytes=", 2 * bytes + kMiB)});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.process->target()));
  std::vector<double> row_sums(size_t(rows), 0);
  v1::TensorInfo t;
  grpc::Status s = testing::UploadFrom(
      *stub, v1::DTYPE_FLOAT32, rows, cols, bytes,
      [&](int64_t offset, char* dst, int64_t n) {
        for (int64_t i = 0; i < n / 4; ++i) {
          const int64_t index = offset / 4 + i;
          const float v = ValueAt(index);
          std::memcpy(dst + 4 * i, &v, 4);
          row_sums[size_t(index / cols)] += v;
        }
      },
      {16 * kMiB}, &t);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(t.bytes(), bytes);

  v1::TransposeRequest tr;
  *tr.mutable_input() = TensorMatrix(t.id());
  tr.mutable_output()->set_keep(true);
  grpc::ClientContext c1;
  SetDeadline(c1, 300);
  v1::TransposeResponse r1;
  s = stub->Transpose(&c1, tr, &r1);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::ReduceRequest rr;
  *rr.mutable_input() = TensorMatrix(t.id());
  rr.set_axis(v1::REDUCE_AXIS_PER_ROW);
  grpc::ClientContext c2;
  SetDeadline(c2, 300);
  v1::ReduceResponse r2;
  s = stub->Reduce(&c2, rr, &r2);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_LE(testing::MaxError(r2.output(), row_sums), 1e-5 * double(cols));
  EXPECT_EQ(ReleaseTensors(*stub, {t.id()}).released(), 1);

  int64_t wrong = 0, received = 0;
  s = testing::DownloadTo(*stub, r1.output().tensor_id(), 0, true,
                          [&](int64_t offset, const std::string& data) {
                            for (int64_t i = 0; i < int64_t(data.size()) / 4; ++i) {
                              const int64_t out = offset / 4 + i, c = out / rows, r = out % rows;
                              float got;
                              std::memcpy(&got, data.data() + 4 * i, 4);
                              wrong += got != ValueAt(r * cols + c);
                            }
                            received += int64_t(data.size());
                          });
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(received, bytes);
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(WaitForHeld(*stub, [](int64_t held) { return held == 0; }));
}

// A server of its own: a 1 MiB budget and a one-second idle lifetime.
class SmallTensorServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartServerWithMetrics(
        GPUCOMPUTE_SERVER_PATH, {testing::BackendFlag(), "--cpu_workers=2", "--tensor_ttl=1s",
                                 "--tensor_memory_bytes=1048576"});
    ASSERT_TRUE(server_.started());
    stub_ = v1::Compute::NewStub(Connect(server_.process->target()));
  }

  v1::TensorInfo Upload(int64_t bytes, grpc::Status* status, int64_t ttl_seconds = 0) {
    v1::TensorInfo info;
    *status = UploadBytes(*stub_, v1::DTYPE_FLOAT32, bytes / 4, 1, std::string(bytes, '\0'),
                          {64 * 1024}, &info, ttl_seconds);
    return info;
  }

  double Metric(const std::string& name) {
    auto scrape = testing::ScrapeMetrics(server_.metrics_port);
    return scrape.ok() ? scrape->Sum(name) : -1;
  }

  testing::ServerWithMetrics server_;
  std::unique_ptr<v1::Compute::Stub> stub_;
};

TEST_F(SmallTensorServerTest, TheBudgetRunsOutAndRecovers) {
  grpc::Status s;
  const v1::TensorInfo first = Upload(600 * 1024, &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  Upload(600 * 1024, &s);
  EXPECT_CODE(s, RESOURCE_EXHAUSTED, "held 614400 bytes, asked 614400 bytes, limit 1048576 bytes");
  // A kept output over the budget too.
  v1::TransposeRequest keep;
  *keep.mutable_input() = TensorMatrix(first.id());
  keep.mutable_output()->set_keep(true);
  grpc::ClientContext ctx;
  v1::TransposeResponse resp;
  EXPECT_CODE(stub_->Transpose(&ctx, keep, &resp), RESOURCE_EXHAUSTED, "limit 1048576 bytes");
  // Freed, the budget takes the second one.
  EXPECT_EQ(ReleaseTensors(*stub_, {first.id()}).released(), 1);
  const v1::TensorInfo second = Upload(600 * 1024, &s);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ListTensors(*stub_).held_bytes(), 600 * 1024);
  EXPECT_EQ(ReleaseTensors(*stub_, {second.id()}).released(), 1);
}

TEST_F(SmallTensorServerTest, IdleTensorsExpireWithNoTrafficAndUseRenewsThem) {
  grpc::Status s;
  const v1::TensorInfo idle = Upload(4096, &s);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Its own three seconds, used every half second: a call may stall for
  // 2.5 s before the tensor lapses (one call of an ASan build on a loaded
  // 2-core machine once took 1.5 s).
  const auto uploaded = std::chrono::steady_clock::now();
  const v1::TensorInfo used = Upload(4096, &s, 3);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // No gRPC call for 1.5 s: only the expiry thread can drop `idle`. The
  // metrics endpoint is read over plain HTTP, not through the service.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Metric("gpucompute_tensor_expiries_total"), 1);
  EXPECT_EQ(Metric("gpucompute_tensor_held_bytes"), 4096);
  // `used` lives on past its lifetime while it is used more often.
  for (int i = 0; i < 8; ++i) {
    v1::ReduceRequest req;
    *req.mutable_input() = TensorMatrix(used.id());
    grpc::ClientContext ctx;
    v1::ReduceResponse resp;
    EXPECT_TRUE(stub_->Reduce(&ctx, req, &resp).ok()) << "use " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_GT(std::chrono::steady_clock::now() - uploaded, std::chrono::seconds(5));
  std::string bytes;
  EXPECT_CODE(DownloadBytes(*stub_, idle.id(), &bytes), NOT_FOUND, idle.id());
  // Unused, it lapses three seconds on: read over HTTP until it has.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Metric("gpucompute_tensor_expiries_total") < 2 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Metric("gpucompute_tensor_expiries_total"), 2);
  EXPECT_EQ(Metric("gpucompute_tensor_held_bytes"), 0);
  EXPECT_CODE(DownloadBytes(*stub_, used.id(), &bytes), NOT_FOUND, "expired");
}

}  // namespace
}  // namespace gpucompute
