// A small batch's members fan out over side streams inside its CUDA graph
// (server/cuda/branches.h): captured, the members land on their branches,
// the origin's later work waits for all of them, and a replay does it
// again; a member that fails fails the capture and leaves no stream in
// capture, so the batch can still run the plain way.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/cuda/branches.h"
#include "server/cuda/cuda_handles.h"
#include "server/cuda/graph_cache.h"

namespace gpucompute::server::cuda {
namespace {

constexpr int kMembers = 7;
constexpr size_t kChunk = 256;  // bytes each member writes

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class BatchBranchesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto stream = CreateStream();
    ASSERT_TRUE(stream.ok()) << stream.status();
    origin_ = std::move(*stream);
    ASSERT_EQ(cudaMalloc(&device_, kMembers * kChunk), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&host_, kMembers * kChunk), cudaSuccess);
  }
  void TearDown() override {
    if (device_ != nullptr) cudaFree(device_);
    if (host_ != nullptr) cudaFreeHost(host_);
  }

  // Member j fills its chunk with j + 1 on the stream it is given, and
  // says which stream and branch that was.
  absl::Status Fill(int j, int branch, cudaStream_t stream) {
    streams_[size_t(j)] = stream;
    branches_[size_t(j)] = branch;
    return cudaMemsetAsync(static_cast<char*>(device_) + size_t(j) * kChunk, j + 1, kChunk,
                           stream) == cudaSuccess
               ? absl::OkStatus()
               : absl::InternalError("cudaMemsetAsync");
  }

  // Clears the device chunks, runs `work` on the origin, copies the chunks
  // back on the origin (after the members, if they joined) and waits.
  std::vector<int> RunAndRead(const std::function<void()>& work) {
    cudaMemsetAsync(device_, 0, kMembers * kChunk, origin_.get());
    work();
    cudaMemcpyAsync(host_, device_, kMembers * kChunk, cudaMemcpyDeviceToHost, origin_.get());
    EXPECT_EQ(cudaStreamSynchronize(origin_.get()), cudaSuccess);
    std::vector<int> first_bytes;
    for (int j = 0; j < kMembers; ++j) {
      const auto* chunk = static_cast<const unsigned char*>(host_) + size_t(j) * kChunk;
      int value = chunk[0];
      for (size_t i = 1; i < kChunk; ++i) {
        if (chunk[i] != chunk[0]) value = -1;
      }
      first_bytes.push_back(value);
    }
    return first_bytes;
  }

  static std::vector<int> Filled() {
    std::vector<int> v;
    for (int j = 0; j < kMembers; ++j) v.push_back(j + 1);
    return v;
  }

  UniqueStream origin_;
  void* device_ = nullptr;
  void* host_ = nullptr;
  std::vector<cudaStream_t> streams_ = std::vector<cudaStream_t>(kMembers);
  std::vector<int> branches_ = std::vector<int>(kMembers, -1);
};

TEST_F(BatchBranchesTest, HowManyBranchesAreUsed) {
  Branches branches(4);
  EXPECT_EQ(branches.Used(kMembers, 8), 1) << "no branch before Prepare";
  ASSERT_TRUE(branches.Prepare().ok());
  EXPECT_EQ(branches.Used(kMembers, 8), 4);
  EXPECT_EQ(branches.Used(kMembers, 2), 2);
  EXPECT_EQ(branches.Used(3, 8), 3);
  EXPECT_EQ(branches.Used(1, 8), 1);
  Branches none(1);
  ASSERT_TRUE(none.Prepare().ok());
  EXPECT_EQ(none.Used(kMembers, 8), 1);
}

TEST_F(BatchBranchesTest, CapturedMembersRunOnTheirBranchesAndReplay) {
  Branches branches(4);
  ASSERT_TRUE(branches.Prepare().ok());
  GraphCounts counts;
  GraphCache graphs(4, /*sightings=*/1, &counts);
  auto fan_out = [&] {
    return branches.FanOut(origin_.get(), kMembers, 8,
                           [this](int j, int b, cudaStream_t s) { return Fill(j, b, s); });
  };
  bool launched = false;
  EXPECT_EQ(RunAndRead([&] { launched = graphs.Launch("fill x7", origin_.get(), fan_out); }),
            Filled());
  ASSERT_TRUE(launched) << "the fan-out could not be captured";
  for (int j = 0; j < kMembers; ++j) {
    EXPECT_EQ(branches_[size_t(j)], j % 4) << "member " << j;
    EXPECT_NE(streams_[size_t(j)], origin_.get()) << "member " << j;
    EXPECT_EQ(streams_[size_t(j)], streams_[size_t(j % 4)]) << "member " << j;
  }
  // Replayed: the members' work comes from the graph, not from fan_out.
  EXPECT_EQ(RunAndRead([&] {
              launched = graphs.Launch("fill x7", origin_.get(), [] {
                return absl::InternalError("a replay must not capture again");
              });
            }),
            Filled());
  EXPECT_TRUE(launched);
  EXPECT_EQ(counts.captured.load(), 1);
  EXPECT_EQ(counts.replayed.load(), 1);

  // What the capture said of its work comes back with every replay.
  int said = 0;
  EXPECT_EQ(RunAndRead([&] {
              launched = graphs.Launch(
                  "fill x7, said", origin_.get(),
                  [&] {
                    said = 7;
                    return fan_out();
                  },
                  &said);
            }),
            Filled());
  ASSERT_TRUE(launched);
  said = -1;
  EXPECT_EQ(RunAndRead([&] {
              launched = graphs.Launch(
                  "fill x7, said", origin_.get(),
                  [] { return absl::InternalError("a replay must not capture again"); }, &said);
            }),
            Filled());
  EXPECT_TRUE(launched);
  EXPECT_EQ(said, 7);
}

TEST_F(BatchBranchesTest, AFailingMemberFailsTheCaptureAndLeavesNoStreamCapturing) {
  Branches branches(4);
  ASSERT_TRUE(branches.Prepare().ok());
  GraphCache graphs(4);
  int launched_members = 0;
  auto failing = [&] {
    return branches.FanOut(origin_.get(), kMembers, 8, [&](int j, int b, cudaStream_t s) {
      if (j == 2) return absl::InternalError("member 2 fails");
      ++launched_members;
      return Fill(j, b, s);
    });
  };
  EXPECT_FALSE(graphs.Launch("failing x7", origin_.get(), failing));
  EXPECT_LT(launched_members, kMembers - 1) << "members were launched after the failure";
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusActive;
  ASSERT_EQ(cudaStreamIsCapturing(origin_.get(), &capturing), cudaSuccess);
  EXPECT_EQ(capturing, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The same branches, outside any capture, still run every member.
  absl::Status plain;
  EXPECT_EQ(RunAndRead([&] {
              plain =
                  branches.FanOut(origin_.get(), kMembers, 8,
                                  [this](int j, int b, cudaStream_t s) { return Fill(j, b, s); });
            }),
            Filled());
  EXPECT_TRUE(plain.ok()) << plain;
  for (int j = 0; j < kMembers; ++j) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ASSERT_EQ(cudaStreamIsCapturing(streams_[size_t(j)], &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "member " << j << "'s stream";
  }
}

TEST_F(BatchBranchesTest, OneBranchKeepsEveryMemberOnTheOrigin) {
  Branches branches(1);
  ASSERT_TRUE(branches.Prepare().ok());
  absl::Status s;
  EXPECT_EQ(RunAndRead([&] {
              s = branches.FanOut(origin_.get(), kMembers, 8,
                                  [this](int j, int b, cudaStream_t st) { return Fill(j, b, st); });
            }),
            Filled());
  EXPECT_TRUE(s.ok()) << s;
  for (int j = 0; j < kMembers; ++j) EXPECT_EQ(streams_[size_t(j)], origin_.get());
}

}  // namespace
}  // namespace gpucompute::server::cuda
