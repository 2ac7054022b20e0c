// Helpers for end-to-end tests over gRPC: channels, random matrices, and
// comparison of a response matrix with a float64 reference.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <random>
#include <vector>

#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "server/grpc/convert.h"
#include "support/test_util.h"

namespace gpucompute::testing {

namespace v1 = ::gpucompute::v1;

inline std::shared_ptr<grpc::Channel> Connect(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

template <typename T>
inline v1::Matrix RandomMatrix(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  v1::Matrix m;
  m.set_dtype(sizeof(T) == 4 ? v1::DTYPE_FLOAT32 : v1::DTYPE_FLOAT64);
  m.set_rows(rows);
  m.set_cols(cols);
  std::vector<T> v = RandomValues<T>(rows * cols, rng);
  m.set_data(v.data(), v.size() * sizeof(T));
  return m;
}

// The same for any dtype: 16-bit values are float draws rounded to nearest.
inline v1::Matrix RandomMatrixOf(v1::DType dtype, int64_t rows, int64_t cols,
                                 std::mt19937_64& rng) {
  if (dtype == v1::DTYPE_FLOAT32) return RandomMatrix<float>(rows, cols, rng);
  if (dtype == v1::DTYPE_FLOAT64) return RandomMatrix<double>(rows, cols, rng);
  v1::Matrix m;
  m.set_dtype(dtype);
  m.set_rows(rows);
  m.set_cols(cols);
  std::vector<uint16_t> v(rows * cols);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (uint16_t& x : v) {
    x = dtype == v1::DTYPE_FLOAT16 ? kernels::ToFloat16(dist(rng)).bits
                                   : kernels::ToBFloat16(dist(rng)).bits;
  }
  m.set_data(v.data(), v.size() * 2);
  return m;
}

inline kernels::Problem ProblemOf(kernels::Op op, const v1::Matrix& a, const v1::Matrix* b) {
  kernels::Problem p;
  p.op = op;
  p.dtype = *server::FromProto(a.dtype());
  p.m = a.rows();
  p.n = op == kernels::Op::kMatMul ? b->cols() : a.cols();
  p.k = op == kernels::Op::kMatMul ? a.cols() : 1;
  return p;
}

// max |got - ref| / max(1, max |ref|) over all elements.
inline double MaxError(const v1::Matrix& got, const std::vector<double>& ref) {
  double scale = 1, err = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  const int64_t n = got.rows() * got.cols();
  const auto dtype = server::FromProto(got.dtype());
  if (int64_t(ref.size()) != n || !dtype) return INFINITY;
  const int64_t size = kernels::ElementSize(*dtype);
  if (int64_t(got.data().size()) != n * size) return INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const char* at = got.data().data() + size * i;
    double g = 0;
    switch (*dtype) {
      case kernels::DType::kFloat32: {
        float f;
        std::memcpy(&f, at, 4);
        g = f;
        break;
      }
      case kernels::DType::kFloat64: std::memcpy(&g, at, 8); break;
      case kernels::DType::kFloat16:
      case kernels::DType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, at, 2);
        g = *dtype == kernels::DType::kFloat16 ? kernels::ToFloat(kernels::Float16{h})
                                               : kernels::ToFloat(kernels::BFloat16{h});
        break;
      }
    }
    err = std::max(err, std::isfinite(g) ? std::fabs(g - ref[i]) / scale : INFINITY);
  }
  return err;
}

// One request of a mixed load, checked against the float64 reference: kind 0
// is a float32 MatMul, 1 a float64 Transpose, 2 a float32 SUM Reduce over
// `axis`, each dimension random in [1, max_dim]. Returns "" or what went wrong.
inline std::string CheckedRandomRequest(v1::Compute::Stub& stub, int kind, int64_t max_dim,
                                        int axis, std::mt19937_64& rng) {
  const int64_t m = 1 + rng() % max_dim, n = 1 + rng() % max_dim, k = 1 + rng() % max_dim;
  grpc::ClientContext ctx;
  grpc::Status s;
  double err = 0, tol = 1e-4;
  if (kind == 0) {
    v1::MatMulRequest req;
    *req.mutable_a() = RandomMatrix<float>(m, k, rng);
    *req.mutable_b() = RandomMatrix<float>(k, n, rng);
    v1::MatMulResponse resp;
    s = stub.MatMul(&ctx, req, &resp);
    err = MaxError(resp.c(),
                   kernels::ReferenceResult(ProblemOf(kernels::Op::kMatMul, req.a(), &req.b()),
                                            req.a().data().data(), req.b().data().data()));
  } else if (kind == 1) {
    v1::TransposeRequest req;
    *req.mutable_input() = RandomMatrix<double>(m, n, rng);
    v1::TransposeResponse resp;
    s = stub.Transpose(&ctx, req, &resp);
    err = MaxError(resp.output(), kernels::ReferenceResult(
                                      ProblemOf(kernels::Op::kTranspose, req.input(), nullptr),
                                      req.input().data().data(), nullptr));
    tol = 0;
  } else {
    v1::ReduceRequest req;
    *req.mutable_input() = RandomMatrix<float>(m, n, rng);
    req.set_axis(static_cast<v1::ReduceAxis>(axis));
    v1::ReduceResponse resp;
    s = stub.Reduce(&ctx, req, &resp);
    kernels::Problem p = ProblemOf(kernels::Op::kReduce, req.input(), nullptr);
    p.reduce_axis = static_cast<kernels::ReduceAxis>(axis);
    err = MaxError(resp.output(), kernels::ReferenceResult(p, req.input().data().data(), nullptr));
    tol = 1e-5 * double(m * n);  // the contract's 1e-5 * sum|x|, with |x| <= 1
  }
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  if (!s.ok()) return "op " + std::to_string(kind) + " " + shape + ": " + s.error_message();
  if (err > tol)
    return "op " + std::to_string(kind) + " " + shape + ": error " + std::to_string(err);
  return "";
}

// A fixture's per-test state: a stub on the suite's server and a fresh seed.
class SeededStubTest : public ::testing::Test {
 protected:
  void ConnectTo(const std::string& target) {
    stub_ = v1::Compute::NewStub(Connect(target));
    seed_ = FreshSeed();
    rng_.seed(seed_);
  }
  std::string SeedNote() const { return "seed " + std::to_string(seed_); }

  std::unique_ptr<v1::Compute::Stub> stub_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

// `clients` concurrent clients, each with its own channel, each sending
// `requests_each` checked requests of mixed ops and sizes. Returns the
// failures, one line per failing client (empty when all were right).
inline std::vector<std::string> RunMixedClients(const std::string& target, int clients,
                                                int requests_each, int64_t max_dim, uint64_t seed) {
  std::vector<std::future<std::string>> running;
  for (int c = 0; c < clients; ++c) {
    running.push_back(std::async(std::launch::async, [=] {
      auto stub = v1::Compute::NewStub(Connect(target));
      std::mt19937_64 rng(seed + c);
      for (int i = 0; i < requests_each; ++i) {
        const std::string error = CheckedRandomRequest(*stub, (c + i) % 3, max_dim, i % 3, rng);
        if (!error.empty()) return "client " + std::to_string(c) + ": " + error;
      }
      return std::string();
    }));
  }
  std::vector<std::string> failures;
  for (auto& f : running) {
    if (std::string error = f.get(); !error.empty()) failures.push_back(error);
  }
  return failures;
}

}  // namespace gpucompute::testing
