// Helpers shared by tests: a fresh random seed per run (printed on failure)
// and random matrices in [-1, 1).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace gpucompute::testing {

// A seed that differs each run unless GPUCOMPUTE_TEST_SEED is set.
inline uint64_t FreshSeed() {
  if (const char* env = std::getenv("GPUCOMPUTE_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

template <typename T>
std::vector<T> RandomValues(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  std::vector<T> v(count);
  for (T& x : v) x = dist(rng);
  return v;
}

}  // namespace gpucompute::testing
