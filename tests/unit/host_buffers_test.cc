#include <gtest/gtest.h>

#include "server/engine/host_buffers.h"

namespace gpucompute::server {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(HostBufferPool, ReusesTheSameMemoryForLargeBuffers) {
  HostBufferPool pool(64 * kMiB);
  auto first = pool.Acquire(8 * kMiB);
  ASSERT_EQ(first->size(), 8 * kMiB);
  const char* memory = first->data();
  pool.Release(std::move(first));
  EXPECT_GE(pool.retained_bytes(), int64_t(8 * kMiB));
  auto smaller = pool.Acquire(5 * kMiB);  // fits in the pooled one
  EXPECT_EQ(smaller->size(), 5 * kMiB);
  EXPECT_EQ(smaller->data(), memory);
  EXPECT_EQ(pool.retained_bytes(), 0);
}

TEST(HostBufferPool, SmallBuffersAndTheLimitAreNotPooled) {
  HostBufferPool pool(10 * kMiB);
  pool.Release(pool.Acquire(1000));
  EXPECT_EQ(pool.retained_bytes(), 0);
  pool.Release(pool.Acquire(8 * kMiB));
  const int64_t kept = pool.retained_bytes();
  EXPECT_GE(kept, int64_t(8 * kMiB));
  // 9 MiB does not fit the pooled buffer, and keeping both would pass the limit.
  auto nine = pool.Acquire(9 * kMiB);
  EXPECT_EQ(pool.retained_bytes(), kept);
  pool.Release(std::move(nine));
  EXPECT_EQ(pool.retained_bytes(), kept);
}

}  // namespace
}  // namespace gpucompute::server
