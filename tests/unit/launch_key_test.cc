// Graph cache keys (LaunchKey): the same work gives the same key, and any
// one field of the problem, the variant or a caller's word apart gives
// another, so that a graph is never replayed for work it did not capture.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/cuda/request_plan.h"

namespace gpucompute::server::cuda {
namespace {

TEST(LaunchKeyTest, EqualForTheSameWorkOnlyEachFieldOrWordApartDiffers) {
  const kernels::Variant one, other;  // told apart by address, as the registry's are
  ComputeJob base;
  base.problem = kernels::Problem{kernels::Op::kMatMul, kernels::DType::kFloat16, 64, 32, 16};
  base.variant = &one;
  const float a = 0, b = 0;
  const std::string key = LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4096, 1});
  EXPECT_EQ(key, LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4096, 1}));

  std::vector<ComputeJob> apart(9, base);
  apart[0].problem.op = kernels::Op::kTranspose;
  apart[1].problem.dtype = kernels::DType::kBFloat16;
  apart[2].problem.m = 65;
  apart[3].problem.n = 33;
  apart[4].problem.k = 17;
  apart[5].problem.reduce_op = kernels::ReduceOp::kMax;
  apart[6].problem.reduce_axis = kernels::ReduceAxis::kPerRow;
  apart[7].problem.float32_output = true;
  apart[8].variant = &other;
  for (size_t i = 0; i < apart.size(); ++i) {
    EXPECT_NE(LaunchKey(apart[i], {KeyWord(&a), KeyWord(&b), 4096, 1}), key) << "field " << i;
  }
  // The caller's words: each one, their order, and how many there are.
  EXPECT_NE(LaunchKey(base, {KeyWord(&b), KeyWord(&b), 4096, 1}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&a), KeyWord(&a), 4096, 1}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4095, 1}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4096, 0}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&b), KeyWord(&a), 4096, 1}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4096}), key);
  EXPECT_NE(LaunchKey(base, {KeyWord(&a), KeyWord(&b), 4096, 1, 0}), key);
  // A batch's key (the member count as its one word) is not a request's.
  EXPECT_NE(LaunchKey(base, {2}), LaunchKey(base, {3}));
  EXPECT_NE(LaunchKey(base, {2}), LaunchKey(base));
}

}  // namespace
}  // namespace gpucompute::server::cuda
