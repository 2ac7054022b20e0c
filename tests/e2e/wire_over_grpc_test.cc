// The server's verdict on mutated request bytes, sent over gRPC, is the one
// protobuf's generated classes give: what protobuf refuses is refused as a
// malformed request; what it accepts is validated and answered exactly as the
// parsed fields say (the same status code, and for OK the result's shape).
// GPUCOMPUTE_WIRE_REQUESTS sets how many mutated requests (default 20000;
// bench/RESULTS.md records a run of 1,000,000).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpucompute/kernels/problem.h"
#include "gpucompute/v1/compute.pb.h"
#include "server/grpc/validate.h"
#include "support/e2e_util.h"
#include "support/server_process.h"
#include "support/test_util.h"
#include "wire/compute_wire.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;

constexpr int64_t kMaxMatrixBytes = 1 << 20;

// A small valid request of `op`, serialized.
std::string ValidRequest(v1::Op op, std::mt19937_64& rng) {
  auto matrix = [&](int64_t rows, int64_t cols) {
    return testing::RandomMatrix<float>(rows, cols, rng);
  };
  const int64_t m = 1 + rng() % 4, k = 1 + rng() % 4, n = 1 + rng() % 4;
  if (op == v1::OP_MATMUL) {
    v1::MatMulRequest r;
    *r.mutable_a() = matrix(m, k);
    *r.mutable_b() = matrix(k, n);
    if (rng() % 2) r.set_variant("cpu_reference");
    return r.SerializeAsString();
  }
  if (op == v1::OP_TRANSPOSE) {
    v1::TransposeRequest r;
    *r.mutable_input() = matrix(m, n);
    return r.SerializeAsString();
  }
  v1::ReduceRequest r;
  *r.mutable_input() = matrix(m, n);
  r.set_op(v1::ReduceOp(rng() % 4));
  r.set_axis(v1::ReduceAxis(rng() % 3));
  return r.SerializeAsString();
}

// Byte flips, insertions, deletions, truncation, duplication of a range.
std::string Mutate(std::string s, std::mt19937_64& rng) {
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[at] = char(rng());
        break;
      case 1: s.insert(s.begin() + long(at), char(rng())); break;
      case 2:
        if (!s.empty()) s.erase(at, 1 + rng() % 4);
        break;
      case 3: s.resize(at); break;
      case 4:
        if (!s.empty()) s[at] = char(s[at] ^ (1 << (rng() % 8)));
        break;
      case 5:
        if (!s.empty()) s.insert(at, s.substr(at, 1 + rng() % 8));
        break;
    }
  }
  return s;
}

struct Expected {
  bool parses = false;
  grpc::StatusCode code = grpc::OK;
  bool checkable = true;  // false: the fields ask for something outside this test
  int64_t rows = 0, cols = 0;
};

template <typename Request>
bool UsesPart2(const Request& r) {
  return r.has_output();
}
bool UsesPart2(const v1::Matrix& m) {
  return m.payload_case() != v1::Matrix::kData && m.payload_case() != v1::Matrix::PAYLOAD_NOT_SET;
}

Expected ExpectedFor(v1::Op op, const std::string& bytes) {
  Expected e;
  server::Limits limits;
  limits.max_matrix_bytes = kMaxMatrixBytes;
  absl::StatusOr<kernels::Problem> problem;
  std::string variant;
  if (op == v1::OP_MATMUL) {
    v1::MatMulRequest r;
    if (!(e.parses = r.ParseFromString(bytes))) return e;
    e.checkable = !UsesPart2(r) && !UsesPart2(r.a()) && !UsesPart2(r.b());
    problem = server::ValidateMatMul(r, limits);
    variant = r.variant();
  } else if (op == v1::OP_TRANSPOSE) {
    v1::TransposeRequest r;
    if (!(e.parses = r.ParseFromString(bytes))) return e;
    e.checkable = !UsesPart2(r) && !UsesPart2(r.input());
    problem = server::ValidateTranspose(r, limits);
    variant = r.variant();
  } else {
    v1::ReduceRequest r;
    if (!(e.parses = r.ParseFromString(bytes))) return e;
    e.checkable = !UsesPart2(r) && !UsesPart2(r.input());
    problem = server::ValidateReduce(r, limits);
    variant = r.variant();
  }
  if (!problem.ok()) {
    e.code = grpc::StatusCode(problem.status().code());
    return e;
  }
  if (variant != "" && variant != "auto" && variant != "cpu_reference") {
    e.code = grpc::INVALID_ARGUMENT;
    return e;
  }
  e.rows = kernels::OutputRows(*problem);
  e.cols = kernels::OutputCols(*problem);
  return e;
}

TEST(WireOverGrpc, MutatedRequestsGetProtobufsVerdict) {
  testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                                {"--backend=cpu", "--metrics_listen=", "--log_level=error",
                                 "--max_matrix_bytes=" + std::to_string(kMaxMatrixBytes)});
  ASSERT_TRUE(server.started());
  const char* env = std::getenv("GPUCOMPUTE_WIRE_REQUESTS");
  const int64_t total = env ? std::atoll(env) : 20000;
  const uint64_t seed = testing::FreshSeed();
  constexpr int kThreads = 8;
  std::atomic<int64_t> divergences{0}, parsed{0}, refused{0}, answered_ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + uint64_t(t));
      auto channel = testing::Connect(server.target());
      grpc::GenericStub stub(channel);
      grpc::CompletionQueue cq;
      for (int64_t i = t; i < total; i += kThreads) {
        const v1::Op op = v1::Op(1 + rng() % 3);
        const std::string bytes = Mutate(ValidRequest(op, rng), rng);
        const Expected want = ExpectedFor(op, bytes);
        const char* method = op == v1::OP_MATMUL      ? "/gpucompute.v1.Compute/MatMul"
                             : op == v1::OP_TRANSPOSE ? "/gpucompute.v1.Compute/Transpose"
                                                      : "/gpucompute.v1.Compute/Reduce";
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        grpc::Slice slice(bytes);
        grpc::ByteBuffer request(&slice, 1), response;
        grpc::Status status;
        auto call = stub.PrepareUnaryCall(&ctx, method, request, &cq);
        call->StartCall();
        call->Finish(&response, &status, nullptr);
        void* tag = nullptr;
        bool ok = false;
        cq.Next(&tag, &ok);
        const bool server_refused_parse =
            status.error_code() == grpc::INVALID_ARGUMENT &&
            status.error_message().rfind("request: ", 0) == 0;  // the parser's own refusals
        std::string why;
        if (want.parses == server_refused_parse) {
          why = want.parses ? "protobuf accepts, the server calls it malformed"
                            : "protobuf refuses, the server parsed it";
        } else if (want.parses && want.checkable && status.error_code() != want.code) {
          why = "status " + std::to_string(status.error_code()) + " (" + status.error_message() +
                "), expected " + std::to_string(want.code);
        } else if (want.parses && want.checkable && status.ok()) {
          std::vector<grpc::Slice> slices;
          (void)response.Dump(&slices);
          auto parsed_response = wire::ParseComputeResponse(slices);
          if (!parsed_response.ok() || parsed_response->output.rows != want.rows ||
              parsed_response->output.cols != want.cols) {
            why = "result shape differs from the protobuf-parsed request's";
          }
          answered_ok++;
        }
        (want.parses ? parsed : refused)++;
        if (!why.empty() && divergences++ < 10) {
          std::string hex;
          for (unsigned char c : bytes)
            hex += "0123456789abcdef"[c >> 4], hex += "0123456789abcdef"[c & 15];
          ADD_FAILURE() << method << " " << hex << ": " << why;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(divergences.load(), 0) << "seed " << seed;
  std::printf(
      "%lld mutated requests: %lld parsed by protobuf (%lld answered OK), %lld refused; "
      "%lld divergences\n",
      (long long)total, (long long)parsed.load(), (long long)answered_ok.load(),
      (long long)refused.load(), (long long)divergences.load());
  EXPECT_EQ(server.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace gpucompute
