// LaunchBatchedForm with variants whose batched form is a recording fake:
// which members it launches, in groups of how many, and what it leaves to
// one launch each. No GPU: the fake only records.
#include "server/cuda/batched_form.h"

#include <gtest/gtest.h>

#include <vector>

namespace gpucompute::server::cuda {
namespace {

using kernels::Buffers;
using kernels::LaunchContext;
using kernels::Problem;

// A variant of at most `most` members a launch that records each launch's
// member count; `refuse_from` and `fail_from`: the launch (0-based) from
// which it answers "no one-launch form" or an error.
struct Fake {
  std::vector<size_t> launches;
  int refuse_from = 1 << 30, fail_from = 1 << 30;
  kernels::Variant variant;
  explicit Fake(int most) {
    variant.name = "fake";
    variant.max_batch_members = most;
    variant.launch_batch = [this](const Problem&, std::span<const Buffers> members,
                                  const LaunchContext&) -> absl::StatusOr<bool> {
      const int n = int(launches.size());
      if (n >= fail_from) return absl::InternalError("launch failed");
      if (n >= refuse_from) return false;
      launches.push_back(members.size());
      return true;
    };
  }
};

TEST(BatchedFormTest, TakesEveryMemberInGroupsOfTheMost) {
  Fake fake(32);
  const std::vector<Buffers> members(70);
  const BatchedLaunches got = LaunchBatchedForm(fake.variant, Problem{}, members, {});
  EXPECT_EQ(got.taken, 70u);
  EXPECT_EQ(got.launches, 3);
  EXPECT_TRUE(got.error.ok());
  EXPECT_EQ(fake.launches, (std::vector<size_t>{32, 32, 6}));
}

TEST(BatchedFormTest, LeavesWhatTheFormDoesNotTake) {
  Fake fake(4);
  fake.refuse_from = 1;
  const std::vector<Buffers> members(10);
  const BatchedLaunches got = LaunchBatchedForm(fake.variant, Problem{}, members, {});
  EXPECT_EQ(got.taken, 4u);
  EXPECT_EQ(got.launches, 1);
  EXPECT_TRUE(got.error.ok());
}

TEST(BatchedFormTest, StopsAtAFailedLaunch) {
  Fake fake(4);
  fake.fail_from = 1;
  const std::vector<Buffers> members(10);
  const BatchedLaunches got = LaunchBatchedForm(fake.variant, Problem{}, members, {});
  EXPECT_EQ(got.taken, 4u);
  EXPECT_EQ(got.error.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(fake.launches.size(), 1u);
}

TEST(BatchedFormTest, TakesNoneWithoutAFormAWorkspaceOrCompany) {
  const std::vector<Buffers> members(5);
  kernels::Variant plain;  // no batched form
  EXPECT_EQ(LaunchBatchedForm(plain, Problem{}, members, {}).taken, 0u);

  Fake alone(32);
  EXPECT_EQ(LaunchBatchedForm(alone.variant, Problem{}, std::span(members).first(1), {}).taken, 0u);
  EXPECT_TRUE(alone.launches.empty());

  Fake scratch(32);
  scratch.variant.workspace_bytes = [](const Problem&) { return size_t(256); };
  EXPECT_EQ(LaunchBatchedForm(scratch.variant, Problem{}, members, {}).taken, 0u);
  EXPECT_TRUE(scratch.launches.empty());
}

}  // namespace
}  // namespace gpucompute::server::cuda
