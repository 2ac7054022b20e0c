// LaunchBatchedForm and LaunchEveryMember with variants whose batched form
// is a recording fake: which members it launches, in groups of how many,
// and what it leaves to one launch each. No GPU: the fake only records.
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

TEST(BatchedFormTest, EveryMemberLaunchesOnceInTheFormOrAlone) {
  Fake fake(4);
  fake.refuse_from = 1;  // takes the first group of 4 only
  const std::vector<Buffers> members(7);
  std::vector<size_t> alone;
  const MemberLaunches got = LaunchEveryMember(fake.variant, Problem{}, members, {}, [&](size_t j) {
    alone.push_back(j);
    return j == 5 ? absl::UnavailableError("member 5 failed") : absl::OkStatus();
  });
  EXPECT_EQ(fake.launches, (std::vector<size_t>{4}));
  EXPECT_EQ(alone, (std::vector<size_t>{4, 5, 6}));
  ASSERT_EQ(got.status.size(), 7u);
  for (size_t j = 0; j < 7; ++j) {
    EXPECT_EQ(got.status[j].ok(), j != 5) << j;
  }
  EXPECT_EQ(got.status[5].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(got.batched_launches, 0);  // some members launched alone
}

TEST(BatchedFormTest, AFailedBatchedLaunchFailsTheMembersItLeft) {
  Fake fake(3);
  fake.fail_from = 1;
  const std::vector<Buffers> members(8);
  int alone = 0;
  const MemberLaunches got = LaunchEveryMember(fake.variant, Problem{}, members, {}, [&](size_t) {
    ++alone;
    return absl::OkStatus();
  });
  EXPECT_EQ(alone, 0);
  for (size_t j = 0; j < 8; ++j) {
    EXPECT_EQ(got.status[j].code(), j < 3 ? absl::StatusCode::kOk : absl::StatusCode::kInternal)
        << j;
  }
  EXPECT_EQ(got.batched_launches, 0);
}

TEST(BatchedFormTest, EveryMemberInTheFormCountsItsLaunches) {
  Fake fake(32);
  const std::vector<Buffers> members(40);
  const MemberLaunches got = LaunchEveryMember(fake.variant, Problem{}, members, {}, [](size_t) {
    ADD_FAILURE() << "no member should launch alone";
    return absl::OkStatus();
  });
  EXPECT_EQ(got.batched_launches, 2);
  EXPECT_EQ(KernelLaunches(got.batched_launches), "2 kernel launches");
  EXPECT_EQ(KernelLaunches(1), "one kernel launch");
  EXPECT_EQ(KernelLaunches(0), "");

  kernels::Variant plain;  // no batched form: each alone, none counted
  int alone = 0;
  const MemberLaunches each = LaunchEveryMember(plain, Problem{}, members, {}, [&](size_t) {
    ++alone;
    return absl::OkStatus();
  });
  EXPECT_EQ(alone, 40);
  EXPECT_EQ(each.batched_launches, 0);
}

}  // namespace
}  // namespace gpucompute::server::cuda
