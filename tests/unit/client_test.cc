// The client library against an in-process fake server: results and reports
// come back intact, tokens are sent, errors keep their gRPC code and read
// "<Method> failed: <CODE>: ...", and large messages pass.
#include "gpucompute/client.h"

#include <atomic>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include <gmock/gmock.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "support/fake_compute_service.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

uint64_t Seed() {
  static const uint64_t seed = std::random_device()();
  return seed;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = testing::FakeServer::Start();
    ASSERT_NE(fake_, nullptr);
  }
  Client Connect(ClientOptions options = {}) {
    options.target = fake_->address;
    absl::StatusOr<Client> client = Client::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return std::move(*client);
  }
  std::unique_ptr<testing::FakeServer> fake_;
};

template <typename T>
void ExpectMatMulMatchesHostReference(const Client& client, int64_t m, int64_t k, int64_t n) {
  SCOPED_TRACE(::testing::Message() << m << "x" << k << "x" << n << " seed " << Seed());
  absl::StatusOr<Matrix> a = Matrix::Random(DTypeOf<T>::value, m, k, Seed());
  absl::StatusOr<Matrix> b = Matrix::Random(DTypeOf<T>::value, k, n, Seed() + 1);
  ASSERT_TRUE(a.ok() && b.ok());
  // Passed as lvalues: the client copies them, so they stay usable here.
  absl::StatusOr<OpResult> c = client.MatMul(*a, *b);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->output.dtype(), DTypeOf<T>::value);
  ASSERT_EQ(c->output.rows(), m);
  ASSERT_EQ(c->output.cols(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += a->at(i, p) * b->at(p, j);
      ASSERT_NEAR(c->output.at(i, j), ref, 1e-5 * std::max(1.0, std::abs(ref))) << i << "," << j;
    }
  }
  EXPECT_EQ(c->report.variant(), "fake_naive");
  EXPECT_EQ(c->report.device(), "fake");
  EXPECT_EQ(c->report.total_us(), 10);
}

// Not gRPC's own default for a bare host (port 0 for a C++ target string).
TEST(WithDefaultPort, AHostWithoutAPortGetsTheServersDefault) {
  EXPECT_EQ(WithDefaultPort("gpu-host"), "gpu-host:50051");
  EXPECT_EQ(WithDefaultPort("gpu-host:7000"), "gpu-host:7000");
  EXPECT_EQ(WithDefaultPort("dns:///gpu-host"), "dns:///gpu-host:50051");
  EXPECT_EQ(WithDefaultPort("dns:///gpu-host:7000"), "dns:///gpu-host:7000");
  EXPECT_EQ(WithDefaultPort("[::1]"), "[::1]:50051");
  EXPECT_EQ(WithDefaultPort("[::1]:7000"), "[::1]:7000");
  EXPECT_EQ(WithDefaultPort("ipv4:10.0.0.1"), "ipv4:10.0.0.1:50051");
  EXPECT_EQ(WithDefaultPort("unix:/run/gpucompute.sock"), "unix:/run/gpucompute.sock");
}

// A target gRPC would misread (a port past 65535 taken modulo 65536, an
// empty one as 443) is refused before any call, naming the address.
TEST(ClientCreate, RefusesAServerAddressWithoutAUsablePort) {
  for (const char* target :
       {"127.0.0.1:99999", "127.0.0.1:0", "localhost:", "gpu-host:http", ",", "a:1,b:2"}) {
    ClientOptions options;
    options.target = target;
    absl::StatusOr<Client> client = Client::Create(options);
    ASSERT_FALSE(client.ok()) << target;
    EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(client.status().message(),
                HasSubstr(absl::StrCat("server address \"", target, "\" is not HOST:PORT")));
  }
  for (const char* target : {"localhost:50051", "gpu-host", "[::1]:7000", "dns:///gpu-host",
                             "unix:/run/gpucompute.sock", "ipv4:10.0.0.1:7000,10.0.0.2:7000"}) {
    ClientOptions options;
    options.target = target;
    EXPECT_TRUE(Client::Create(options).ok()) << target;
  }
}

TEST(ClientCreate, RefusesATlsFileWithoutAPemBlock) {
  const std::string path = ::testing::TempDir() + "/not-a-certificate.pem";
  std::ofstream(path) << "just some text\n";
  ClientOptions options;
  options.target = "localhost:50051";
  options.tls_root_ca_file = path;
  absl::StatusOr<Client> client = Client::Create(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("holds no PEM block"));
  std::remove(path.c_str());
}

// A matrix too large for this host is an error to report, not an abort
// (nor an allocation a sanitizer would stop): 2^62 bytes is past any
// host's memory.
TEST(MatrixTest, AMatrixTooLargeToAllocateIsResourceExhausted) {
  absl::StatusOr<Matrix> m = Matrix::Zeros(DType::kFloat32, int64_t{1} << 30, int64_t{1} << 30);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(m.status().message(), HasSubstr("cannot allocate 4611686018427387904 bytes"));
}

TEST_F(ClientTest, MatMulReturnsResultAndReport) {
  Client client = Connect();
  ExpectMatMulMatchesHostReference<float>(client, 33, 17, 9);
  ExpectMatMulMatchesHostReference<double>(client, 1, 7, 1);
  ExpectMatMulMatchesHostReference<float>(client, 5, 1, 6);
}

// ClientOptions::busy_poll: the same answers and errors from calls that
// poll for them, the deadline included.
TEST_F(ClientTest, BusyPollingCallsAnswerTheSame) {
  ClientOptions options;
  options.busy_poll = true;
  options.deadline = absl::Milliseconds(200);  // the "slow" variant takes 500
  Client client = Connect(options);
  ExpectMatMulMatchesHostReference<float>(client, 33, 17, 9);
  absl::StatusOr<HealthStatus> health = client.Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
  MatMulOptions slow;
  slow.variant = "slow";
  absl::StatusOr<OpResult> late = client.MatMul(*Matrix::Zeros(DType::kFloat32, 1, 1),
                                                *Matrix::Zeros(DType::kFloat32, 1, 1), slow);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, MovedInputsAreSentWithoutCopy) {
  Client client = Connect();
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat64, 4, 3, Seed());
  ASSERT_TRUE(a.ok());
  const double a01 = a->at(0, 1);
  absl::StatusOr<OpResult> t = client.Transpose(std::move(*a), "fake_variant");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->output.ShapeString(), "3x4 float64");
  EXPECT_EQ(t->output.at(1, 0), a01);
  EXPECT_EQ(t->report.variant(), "fake_variant");
}

TEST_F(ClientTest, ComputeCallsTakeTurnsOnSeveralConnections) {
  ClientOptions options;
  options.connections = 3;
  Client client = Connect(options);
  ASSERT_EQ(client.channels().size(), 3u);
  EXPECT_EQ(client.channel(), client.channels().front());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2; ++i) {
        absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 5 + t, 3, Seed() + t);
        absl::StatusOr<OpResult> r = client.Transpose(*std::move(a));
        if (r.ok() && r->output.rows() == 3 && r->output.cols() == 5 + t) ++ok;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  // Six calls in turn: every channel has connected.
  for (const auto& channel : client.channels()) {
    EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);
  }
}

TEST_F(ClientTest, ReduceProfileAndServerInfo) {
  Client client = Connect();
  const std::vector<float> values = {1.5f, 2.0f, -0.5f, 4.0f};
  absl::StatusOr<OpResult> sum = client.Reduce(*Matrix::FromValues<float>(2, 2, values),
                                               v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->output.ShapeString(), "1x1 float32");
  EXPECT_EQ(sum->output.at(0, 0), 7.0);

  v1::ProfileRequest request;
  request.set_op(v1::OP_MATMUL);
  request.set_m(64);
  request.set_n(64);
  request.set_k(64);
  absl::StatusOr<v1::ProfileResponse> profile = client.Profile(request);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->selected(), "fake_fast");
  ASSERT_EQ(profile->variants_size(), 2);

  absl::StatusOr<v1::ServerInfo> info = client.GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), "fake-1");
  EXPECT_EQ(info->max_matrix_bytes(), 1LL << 30);
}

TEST_F(ClientTest, ServerErrorsKeepCodeAndMessage) {
  Client client = Connect();
  absl::StatusOr<OpResult> c =
      client.MatMul(*Matrix::Zeros(DType::kFloat32, 2, 3), *Matrix::Zeros(DType::kFloat32, 4, 5));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "MatMul failed: INVALID_ARGUMENT: a.cols 3 != b.rows 4");

  absl::StatusOr<OpResult> r = client.Reduce(*Matrix::Zeros(DType::kFloat32, 2, 3),
                                             v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_PER_ROW);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(r.status().message()), StartsWith("Reduce failed: UNIMPLEMENTED: "));
}

TEST_F(ClientTest, MalformedResponseIsInternal) {
  Client client = Connect();
  MatMulOptions options;
  options.variant = "malformed";
  absl::StatusOr<OpResult> c = client.MatMul(*Matrix::Zeros(DType::kFloat32, 2, 2),
                                             *Matrix::Zeros(DType::kFloat32, 2, 2), options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("malformed result: c: matrix data is 3 bytes but a 2x2 float32 matrix "
                        "needs 16"));
}

TEST_F(ClientTest, DeadlineExceeded) {
  ClientOptions options;
  options.deadline = absl::Milliseconds(100);
  Client client = Connect(options);
  MatMulOptions slow;
  slow.variant = "slow";
  absl::StatusOr<OpResult> c = client.MatMul(*Matrix::Zeros(DType::kFloat32, 1, 1),
                                             *Matrix::Zeros(DType::kFloat32, 1, 1), slow);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(c.status().message()), StartsWith("MatMul failed: DEADLINE_EXCEEDED"));
}

TEST_F(ClientTest, SendsBearerTokenFromStringOrFile) {
  ClientOptions options;
  options.bearer_token = "s3cret";
  ASSERT_TRUE(Connect(options).GetServerInfo().ok());
  EXPECT_EQ(fake_->service.last_authorization(), "Bearer s3cret");

  const std::string path = ::testing::TempDir() + "/token";
  std::ofstream(path) << "  from-file\r\nsecond line ignored, as by the server\n";
  ClientOptions from_file;
  from_file.bearer_token_file = path;
  ASSERT_TRUE(Connect(from_file).GetServerInfo().ok());
  EXPECT_EQ(fake_->service.last_authorization(), "Bearer from-file");

  ASSERT_TRUE(Connect().GetServerInfo().ok());
  EXPECT_EQ(fake_->service.last_authorization(), "");
}

TEST_F(ClientTest, MessagesLargerThanGrpcDefaultPass) {
  Client client = Connect();
  // 48 MiB each way, well above gRPC's 4 MiB default receive limit.
  absl::StatusOr<Matrix> big = Matrix::Random(DType::kFloat32, 3 << 10, 4 << 10, Seed());
  ASSERT_TRUE(big.ok());
  const double corner = big->at(3071, 4095);
  absl::StatusOr<OpResult> t = client.Transpose(std::move(*big));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->output.ShapeString(), "4096x3072 float32");
  EXPECT_EQ(t->output.at(4095, 3071), corner);
}

TEST_F(ClientTest, RequestTooLargeForOneMessageFailsBeforeSending) {
  ClientOptions options;
  options.max_message_bytes = 1000;
  Client client = Connect(options);
  absl::StatusOr<OpResult> t = client.Transpose(*Matrix::Zeros(DType::kFloat64, 100, 100));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("Transpose failed: request payload is 80000 bytes"));
}

TEST_F(ClientTest, HealthCheck) {
  Client client = Connect();
  absl::StatusOr<HealthStatus> overall = client.Health();
  ASSERT_TRUE(overall.ok()) << overall.status();
  EXPECT_EQ(*overall, HealthStatus::kServing);

  fake_->server->GetHealthCheckService()->SetServingStatus("gpucompute.v1.Compute", false);
  absl::StatusOr<HealthStatus> compute = client.Health("gpucompute.v1.Compute");
  ASSERT_TRUE(compute.ok()) << compute.status();
  EXPECT_EQ(*compute, HealthStatus::kNotServing);

  absl::StatusOr<HealthStatus> unknown = client.Health("no.such.Service");
  ASSERT_FALSE(unknown.ok());  // the default service answers NOT_FOUND
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, EchoAnswersTheBytesAskedForAndRefusesANegativePayload) {
  Client client = Connect();
  absl::StatusOr<int64_t> got = client.Echo(/*response_bytes=*/1000, /*payload_bytes=*/37);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, 1000);

  absl::StatusOr<int64_t> refused = client.Echo(10, -1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("payload_bytes: -1"));
}

TEST(ClientUnconnectedTest, UnreachableServerIsUnavailableAndNamesTarget) {
  // Bind and release a port so that nothing listens there.
  std::string target;
  {
    auto fake = testing::FakeServer::Start();
    ASSERT_NE(fake, nullptr);
    target = fake->address;
  }
  ClientOptions options;
  options.target = target;
  options.deadline = absl::Seconds(5);
  absl::StatusOr<Client> client = Client::Create(options);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<v1::ServerInfo> info = client->GetServerInfo();
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(info.status().message()),
              StartsWith("GetServerInfo failed: UNAVAILABLE:"));
  EXPECT_THAT(std::string(info.status().message()), HasSubstr("(server " + target + ")"));
}

TEST(ClientUnconnectedTest, CreateRejectsBadOptions) {
  ClientOptions both;
  both.bearer_token = "x";
  both.bearer_token_file = "y";
  EXPECT_EQ(Client::Create(both).status().code(), absl::StatusCode::kInvalidArgument);

  ClientOptions missing_token;
  missing_token.bearer_token_file = ::testing::TempDir() + "/no-such-token";
  absl::Status st = Client::Create(missing_token).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("cannot read bearer token file"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("no-such-token"));

  const std::string empty = ::testing::TempDir() + "/empty-token";
  std::ofstream(empty) << " \n";
  ClientOptions empty_token;
  empty_token.bearer_token_file = empty;
  EXPECT_THAT(std::string(Client::Create(empty_token).status().message()), HasSubstr("is empty"));

  ClientOptions cert_only;
  cert_only.tls_cert_file = "client.pem";
  EXPECT_THAT(std::string(Client::Create(cert_only).status().message()),
              HasSubstr("both a client certificate and its private key"));

  ClientOptions missing_ca;
  missing_ca.tls_root_ca_file = ::testing::TempDir() + "/no-such-ca.pem";
  EXPECT_THAT(std::string(Client::Create(missing_ca).status().message()),
              HasSubstr("cannot read TLS root CA file"));

  ClientOptions no_connection;
  no_connection.connections = 0;
  EXPECT_THAT(std::string(Client::Create(no_connection).status().message()),
              HasSubstr("connections must be at least 1, got 0"));

  ClientOptions no_deadline;
  no_deadline.deadline = absl::ZeroDuration();
  EXPECT_EQ(Client::Create(no_deadline).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NamesTest, ParseReadsBackEveryName) {
  for (v1::ReduceOp op :
       {v1::REDUCE_OP_SUM, v1::REDUCE_OP_MIN, v1::REDUCE_OP_MAX, v1::REDUCE_OP_MEAN}) {
    EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
  }
  for (v1::ReduceAxis axis :
       {v1::REDUCE_AXIS_ALL, v1::REDUCE_AXIS_PER_ROW, v1::REDUCE_AXIS_PER_COLUMN}) {
    EXPECT_EQ(*ParseReduceAxis(ReduceAxisName(axis)), axis);
  }
  for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
    EXPECT_EQ(*ParseOp(OpName(op)), op);
  }
  EXPECT_EQ(ParseReduceOp("median").status().message(),
            "expected sum, min, max or mean, got 'median'");
  EXPECT_EQ(ParseReduceAxis("").status().message(), "expected all, per_row or per_column, got ''");
  EXPECT_EQ(ParseOp("MATMUL").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(OpName(v1::OP_UNSPECIFIED), "unspecified");
}

// MxKxN for matmul: the order of a @ b, whatever order ProfileRequest keeps.
TEST(ShapeTest, MatMulIsMxKxN) {
  absl::StatusOr<OpShape> s = ParseShape(v1::OP_MATMUL, "512x256x128");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->m, 512);
  EXPECT_EQ(s->k, 256);
  EXPECT_EQ(s->n, 128);
  EXPECT_EQ(ShapeText(v1::OP_MATMUL, *s), "512x256x128");
  EXPECT_STREQ(ShapeSyntax(v1::OP_MATMUL), "MxKxN");

  s = ParseShape(v1::OP_TRANSPOSE, "30X20");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->m, 30);
  EXPECT_EQ(s->n, 20);
  EXPECT_EQ(s->k, 0);
  EXPECT_EQ(ShapeText(v1::OP_REDUCE, *s), "30x20");

  EXPECT_EQ(ParseShape(v1::OP_MATMUL, "8x8").status().message(),
            "expected 3 dimensions (MxKxN, e.g. 512x256x128), got '8x8'");
  EXPECT_EQ(ParseShape(v1::OP_REDUCE, "8x0").status().message(),
            "expected MxN with positive integers, e.g. 4096x4096, got '8x0'");
  EXPECT_FALSE(ParseShape(v1::OP_REDUCE, "8x").ok());
  EXPECT_FALSE(ParseShape(v1::OP_REDUCE, "").ok());
}

TEST(MatrixTest, ShapesSizesAndViews) {
  EXPECT_EQ(*MatrixByteSize(DType::kFloat64, 3, 5), 120);
  EXPECT_FALSE(MatrixByteSize(DType::kFloat32, -1, 5).ok());
  EXPECT_THAT(std::string(MatrixByteSize(DType::kFloat64, 1LL << 40, 1LL << 30).status().message()),
              HasSubstr("overflows int64"));

  const std::vector<double> values = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<Matrix> m = Matrix::FromValues<double>(2, 3, values);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->at(1, 0), 4.0);
  EXPECT_EQ(m->values<double>().size(), 6u);
  EXPECT_THAT(std::string(Matrix::FromValues<double>(4, 2, values).status().message()),
              HasSubstr("6 values given for a 4x2 matrix (8 expected)"));
  EXPECT_FALSE(Matrix::FromBytes(DType::kFloat32, 2, 2, "short").ok());

  std::string bytes = m->ReleaseBytes();
  EXPECT_EQ(bytes.size(), 48u);
  EXPECT_EQ(m->elements(), 0);

  EXPECT_EQ(*ParseDType("float64"), DType::kFloat64);
  EXPECT_FALSE(ParseDType("int8").ok());
}

TEST(MatrixTest, RandomIsReproducibleAndInRange) {
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 64, 65, 7);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat32, 64, 65, 7);
  absl::StatusOr<Matrix> c = Matrix::Random(DType::kFloat32, 64, 65, 8);
  EXPECT_EQ(a->bytes(), b->bytes());
  EXPECT_NE(a->bytes(), c->bytes());
  for (float v : a->values<float>()) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
  }
}

TEST(MatrixDeathTest, TypedViewOfWrongDTypeAborts) {
  absl::StatusOr<Matrix> m = Matrix::Zeros(DType::kFloat32, 1, 1);
  EXPECT_DEATH(m->values<double>(), "typed view as float64 of a float32 matrix");
}

}  // namespace
}  // namespace gpucompute
