// End to end: TLS, mutual TLS and bearer-token auth of the real server
// binary, with certificates generated here by the openssl CLI (a CA, a
// server certificate for 127.0.0.1, a client certificate, and a second CA
// that the server does not trust), through the C++ client library and raw
// gRPC stubs; transport limits; configuration mistakes stopping the server.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>

#include "gpucompute/client.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "protos/reflection_client.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/server_process.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace fs = std::filesystem;
namespace v1 = ::gpucompute::v1;
using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::Connect;
using testing::FreshSeed;
using testing::RandomMatrix;
using testing::ServerProcess;

constexpr char kToken[] = "s3cret-Token_0123456789abcdef";

// Certificates for one test process, removed at the end.
class Pki {
 public:
  Pki() {
    std::string dir_template = (fs::temp_directory_path() / "gpucompute-pki-XXXXXX").string();
    if (mkdtemp(dir_template.data()) == nullptr) return;
    dir_ = dir_template;
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    Write("server.ext", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    Write("client.ext", "extendedKeyUsage=clientAuth\n");
    ok_ = Run("openssl req -x509 " + ec +
              " -days 2 -subj '/CN=gpucompute test CA' -keyout ca.key -out ca.crt") &&
          Run("openssl req -x509 " + ec +
              " -days 2 -subj '/CN=untrusted CA' -keyout rogue-ca.key -out rogue-ca.crt") &&
          Issue("server", "ca", "/CN=localhost") &&
          Issue("client", "ca", "/CN=gpucompute-client") &&
          Issue("rogue-client", "rogue-ca", "/CN=rogue-client", "client.ext");
    Write("token", std::string(kToken) + "\nsecond lines are ignored\n");
    Write("empty-token", "\n");
  }
  ~Pki() {
    if (!dir_.empty()) {
      std::error_code ignored;
      fs::remove_all(dir_, ignored);
    }
  }
  bool ok() const { return ok_; }
  std::string Path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

 private:
  bool Run(const std::string& command) const {
    return std::system(("cd '" + dir_ + "' && " + command + " >/dev/null 2>&1").c_str()) == 0;
  }
  // A key and a certificate signed by `ca`; server.ext or client.ext by name.
  bool Issue(const std::string& name, const std::string& ca, const std::string& subject,
             const std::string& ext = "") const {
    const std::string extfile = ext.empty() ? name + ".ext" : ext;
    return Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj '" +
               subject + "' -keyout " + name + ".key -out " + name + ".csr") &&
           Run("openssl x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca +
               ".key -CAcreateserial -days 2 -extfile " + extfile + " -out " + name + ".crt");
  }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name)) << text;
  }

  std::string dir_;
  bool ok_ = false;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new Pki; }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(pki_->ok()) << "openssl could not generate certificates"; }

  static std::string P(const std::string& name) { return pki_->Path(name); }
  static std::vector<std::string> TlsFlags() {
    return {"--backend=cpu", "--tls_cert=" + P("server.crt"), "--tls_key=" + P("server.key")};
  }
  static std::vector<std::string> MtlsFlags() {
    auto flags = TlsFlags();
    flags.push_back("--tls_client_ca=" + P("ca.crt"));
    return flags;
  }

  // GetServerInfo through the client library with `options` (target filled in).
  static absl::Status InfoWith(const ServerProcess& server, ClientOptions options) {
    options.target = server.target();
    options.deadline = absl::Seconds(10);
    auto client = Client::Create(options);
    if (!client.ok()) return client.status();
    return client->GetServerInfo().status();
  }

  static Pki* pki_;
};
Pki* SecurityTest::pki_ = nullptr;

ClientOptions TrustingCa(const std::string& ca) {
  ClientOptions options;
  options.tls_root_ca_file = ca;
  return options;
}

TEST_F(SecurityTest, TlsAcceptsClientsThatTrustTheCa) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, TlsFlags());
  ASSERT_TRUE(server.started());
  ClientOptions options = TrustingCa(P("ca.crt"));
  options.target = server.target();
  auto client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE(client->GetServerInfo().ok());
  auto health = client->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, HealthStatus::kServing);
  auto a = Matrix::Random(DType::kFloat32, 31, 17, FreshSeed());
  auto b = Matrix::Random(DType::kFloat32, 17, 5, FreshSeed());
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = client->MatMul(std::move(*a), std::move(*b));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->output.rows(), 31);
  EXPECT_EQ(c->output.cols(), 5);
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

TEST_F(SecurityTest, TlsRejectsClientsWithoutTheCa) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, TlsFlags());
  ASSERT_TRUE(server.started());
  // The system roots do not include the test CA.
  ClientOptions system_roots;
  system_roots.use_tls = true;
  EXPECT_EQ(InfoWith(server, system_roots).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(InfoWith(server, TrustingCa(P("rogue-ca.crt"))).code(), absl::StatusCode::kUnavailable);
  // Plaintext against the TLS port.
  EXPECT_EQ(InfoWith(server, ClientOptions{}).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, MtlsFlags());
  ASSERT_TRUE(server.started());
  EXPECT_EQ(InfoWith(server, TrustingCa(P("ca.crt"))).code(), absl::StatusCode::kUnavailable)
      << "accepted a client without a certificate";
  ClientOptions rogue = TrustingCa(P("ca.crt"));
  rogue.tls_cert_file = P("rogue-client.crt");
  rogue.tls_key_file = P("rogue-client.key");
  EXPECT_EQ(InfoWith(server, rogue).code(), absl::StatusCode::kUnavailable)
      << "accepted a client certificate from an untrusted CA";
  ClientOptions good = TrustingCa(P("ca.crt"));
  good.tls_cert_file = P("client.crt");
  good.tls_key_file = P("client.key");
  EXPECT_TRUE(InfoWith(server, good).ok());
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

// Raw stubs, to control the metadata exactly.
grpc::Status InfoWithMetadata(const std::string& target,
                              const std::vector<std::pair<std::string, std::string>>& metadata) {
  auto stub = v1::Compute::NewStub(Connect(target));
  grpc::ClientContext ctx;
  for (const auto& [key, value] : metadata) ctx.AddMetadata(key, value);
  v1::ServerInfo info;
  return stub->GetServerInfo(&ctx, {}, &info);
}

TEST_F(SecurityTest, TokenAuthAcceptsTheTokenAndRejectsOthers) {
  auto server = testing::StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--auth_token_file=" + P("token")});
  ASSERT_TRUE(server.started());
  const std::string target = server.process->target();

  grpc::Status s = InfoWithMetadata(target, {});
  EXPECT_EQ(s.error_code(), grpc::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("authorization: Bearer"), std::string::npos)
      << s.error_message();
  s = InfoWithMetadata(target, {{"authorization", "Bearer wrong"}});
  EXPECT_EQ(s.error_code(), grpc::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(), "invalid bearer token");
  s = InfoWithMetadata(target, {{"authorization", std::string("Bearer ") + kToken + "x"}});
  EXPECT_EQ(s.error_code(), grpc::UNAUTHENTICATED);
  s = InfoWithMetadata(target, {{"authorization", std::string("Basic ") + kToken}});
  EXPECT_EQ(s.error_code(), grpc::UNAUTHENTICATED);
  EXPECT_TRUE(InfoWithMetadata(target, {{"authorization", std::string("Bearer ") + kToken}}).ok());
  EXPECT_TRUE(InfoWithMetadata(target, {{"authorization", std::string("bearer ") + kToken}}).ok())
      << "the scheme is case-insensitive";

  // Every Compute method checks it, before validating anything.
  auto stub = v1::Compute::NewStub(Connect(target));
  {
    grpc::ClientContext ctx;
    v1::MatMulRequest req;  // invalid, but unauthenticated first
    v1::MatMulResponse resp;
    EXPECT_EQ(stub->MatMul(&ctx, req, &resp).error_code(), grpc::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    v1::ProfileResponse resp;
    EXPECT_EQ(stub->Profile(&ctx, {}, &resp).error_code(), grpc::UNAUTHENTICATED);
  }
  {
    std::mt19937_64 rng(FreshSeed());
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
    v1::TransposeRequest req;
    *req.mutable_input() = RandomMatrix<float>(7, 9, rng);
    v1::TransposeResponse resp;
    EXPECT_TRUE(stub->Transpose(&ctx, req, &resp).ok());
  }

  // Health and reflection stay open for probes and tools.
  auto health = Health::NewStub(Connect(target));
  for (const char* service : {"", "gpucompute.v1.Compute"}) {
    grpc::ClientContext ctx;
    HealthCheckRequest req;
    req.set_service(service);
    HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING) << service;
  }
  {
    auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(Connect(target));
    grpc::ClientContext ctx;
    auto stream = reflection->ServerReflectionInfo(&ctx);
    grpc::reflection::v1alpha::ServerReflectionRequest req;
    req.set_list_services("");
    ASSERT_TRUE(stream->Write(req));
    grpc::reflection::v1alpha::ServerReflectionResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_GT(resp.list_services_response().service_size(), 0);
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }

  // The client library sends the token file's content.
  ClientOptions options;
  options.bearer_token = kToken;
  EXPECT_TRUE(InfoWith(*server.process, options).ok());

  // Refusals are counted like any other outcome.
  auto scrape = testing::ScrapeMetricsSettled(server.metrics_port);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_EQ(scrape->Sum("gpucompute_requests_total",
                        {{"op", "server_info"}, {"code", "UNAUTHENTICATED"}}),
            4);
  EXPECT_EQ(scrape->Sum("gpucompute_requests_total", {{"code", "UNAUTHENTICATED"}}), 6);
  EXPECT_EQ(server.process->Stop(SIGTERM), 0);
}

TEST_F(SecurityTest, TlsWithTokenThroughTheClientLibrary) {
  auto flags = MtlsFlags();
  flags.push_back("--auth_token_file=" + P("token"));
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, flags);
  ASSERT_TRUE(server.started());
  ClientOptions options = TrustingCa(P("ca.crt"));
  options.tls_cert_file = P("client.crt");
  options.tls_key_file = P("client.key");
  EXPECT_EQ(InfoWith(server, options).code(), absl::StatusCode::kUnauthenticated);
  options.bearer_token = kToken;
  EXPECT_TRUE(InfoWith(server, options).ok());
}

// A message larger than two matrices of --max_matrix_bytes is refused by the
// transport before the server reads it.
TEST_F(SecurityTest, OversizedMessagesAreRefused) {
  ServerProcess server(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--max_matrix_bytes=1048576"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  std::mt19937_64 rng(FreshSeed());
  v1::TransposeRequest req;
  *req.mutable_input() = RandomMatrix<float>(1024, 1024, rng);  // 4 MiB
  grpc::ClientContext ctx;
  v1::TransposeResponse resp;
  const grpc::Status s = stub->Transpose(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED) << s.error_message();
  // Within the transport limit, the validator names the limit.
  *req.mutable_input() = RandomMatrix<float>(600, 600, rng);  // 1.4 MiB
  grpc::ClientContext ctx2;
  const grpc::Status s2 = stub->Transpose(&ctx2, req, &resp);
  EXPECT_EQ(s2.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_NE(s2.error_message().find("max_matrix_bytes"), std::string::npos) << s2.error_message();
}

// --max_concurrent_streams=1: one connection's requests reach the server one
// at a time; the others wait in the client and still succeed.
TEST_F(SecurityTest, ConcurrentStreamsPerConnectionAreLimited) {
  // One worker: requests that reach the server together queue for it, and
  // each answer reports how long its request waited.
  ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                       {"--backend=cpu", "--cpu_workers=1", "--max_concurrent_streams=1"});
  ASSERT_TRUE(server.started());
  std::mt19937_64 rng(FreshSeed());
  v1::MatMulRequest req;
  *req.mutable_a() = RandomMatrix<float>(300, 300, rng);
  *req.mutable_b() = RandomMatrix<float>(300, 300, rng);
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  constexpr int kThreads = 4, kCallsEach = 6;
  std::vector<std::future<std::vector<v1::ExecutionReport>>> calls;
  for (int i = 0; i < kThreads; ++i) {
    calls.push_back(std::async(std::launch::async, [&] {
      std::vector<v1::ExecutionReport> reports;
      for (int c = 0; c < kCallsEach; ++c) {
        grpc::ClientContext ctx;
        v1::MatMulResponse resp;
        const grpc::Status s = stub->MatMul(&ctx, req, &resp);
        EXPECT_TRUE(s.ok()) << s.error_message();
        if (s.ok()) reports.push_back(resp.report());
      }
      return reports;
    }));
  }
  std::vector<int64_t> queue_us, compute_us;
  for (auto& f : calls) {
    for (const v1::ExecutionReport& r : f.get()) {
      queue_us.push_back(r.queue_us());
      compute_us.push_back(r.compute_us());
    }
  }
  ASSERT_EQ(queue_us.size(), size_t(kThreads * kCallsEach));
  // Without the limit the four threads' requests are in the server at once
  // and each waits behind the others: about three MatMuls. With it, the
  // next request arrives once the last answer has gone, and waits only for
  // the worker to come back from answering, which a loaded machine may
  // delay now and then: the median stays far below one MatMul. (Scraping
  // the requests in the server instead read 2 in a third of the scrapes on
  // a 2-core machine: each answer goes out before its request stops
  // counting as running.)
  const auto median = [](std::vector<int64_t> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  const int64_t queued = median(queue_us), computed = median(compute_us);
  EXPECT_LT(queued * 4, computed) << "median wait " << queued << " us, median MatMul " << computed
                                  << " us";
}

// Configuration mistakes stop the server at start (it never prints its address).
TEST_F(SecurityTest, BadSecurityConfigurationStopsTheServer) {
  const std::vector<std::vector<std::string>> bad = {
      {"--tls_cert=" + P("server.crt")},                                   // no key
      {"--tls_cert=" + P("server.crt"), "--tls_key=" + P("client.key")},   // key of another cert
      {"--tls_cert=" + P("missing.crt"), "--tls_key=" + P("server.key")},  // unreadable
      {"--tls_cert=" + P("server.key"), "--tls_key=" + P("server.key")},   // not a certificate
      {"--tls_client_ca=" + P("ca.crt")},                                  // mTLS without TLS
      {"--auth_token_file=" + P("empty-token")},
      {"--auth_token_file=" + P("missing-token")},
      {"--max_concurrent_streams=-1"},
  };
  for (const auto& flags : bad) {
    std::vector<std::string> all = {"--backend=cpu", "--metrics_listen="};
    all.insert(all.end(), flags.begin(), flags.end());
    ServerProcess server(GPUCOMPUTE_SERVER_PATH, all);
    EXPECT_FALSE(server.started()) << flags.back();
  }
}

}  // namespace
}  // namespace gpucompute
