// Helpers for end-to-end tests over gRPC: channels, random matrices, and
// comparison of a response matrix with a float64 reference.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gpucompute/kernels/problem.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "server/convert.h"
#include "test_util.h"

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
  const bool f32 = got.dtype() == v1::DTYPE_FLOAT32;
  double scale = 1, err = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  const int64_t n = got.rows() * got.cols();
  if (int64_t(ref.size()) != n) return INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    double g;
    if (f32) {
      float f;
      std::memcpy(&f, got.data().data() + 4 * i, 4);
      g = f;
    } else {
      std::memcpy(&g, got.data().data() + 8 * i, 8);
    }
    err = std::max(err, std::isfinite(g) ? std::fabs(g - ref[i]) / scale : INFINITY);
  }
  return err;
}

}  // namespace gpucompute::testing
