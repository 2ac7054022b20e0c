// The staging copier: gathering pieces of any sizes gives the bytes in order,
// whether the copy is split over threads or not.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/cuda/host_copy.h"
#include "support/test_util.h"

namespace gpucompute::server::cuda {
namespace {

TEST(HostCopyPool, GathersPiecesOfAnySizeInOrder) {
  HostCopyPool pool(3);
  const uint64_t seed = testing::FreshSeed();
  std::mt19937_64 rng(seed);
  for (size_t total : {size_t(1), size_t(1000), size_t(3) << 20, size_t(9) << 20}) {
    std::string src(total, '\0');
    for (char& c : src) c = char(rng());
    std::vector<absl::Span<const char>> pieces;
    for (size_t at = 0; at < total;) {
      const size_t n = std::min(total - at, size_t(1 + rng() % (total / 3 + 1)));
      pieces.emplace_back(src.data() + at, n);
      at += n;
    }
    std::string dst(total, '\0');
    pool.Gather(dst.data(), pieces);
    EXPECT_EQ(dst, src) << "total " << total << " seed " << seed;
    std::string copy(total, '\0');
    pool.Copy(copy.data(), src.data(), total);
    EXPECT_EQ(copy, src);
  }
}

}  // namespace
}  // namespace gpucompute::server::cuda
