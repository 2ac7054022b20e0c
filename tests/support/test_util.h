// Helpers shared by tests: a fresh random seed per run (printed on failure),
// random matrices in [-1, 1), and the backend end-to-end servers run on.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gpucompute::testing {

// A seed that differs each run unless GPUCOMPUTE_TEST_SEED is set.
inline uint64_t FreshSeed() {
  if (const char* env = std::getenv("GPUCOMPUTE_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  return std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
}

// The backend of the servers the end-to-end suites start: "cpu" (CI) unless
// GPUCOMPUTE_TEST_BACKEND names another, e.g. "cuda" on a GPU host.
inline std::string TestBackend() {
  const char* env = std::getenv("GPUCOMPUTE_TEST_BACKEND");
  return env != nullptr && *env != 0 ? env : "cpu";
}
inline std::string BackendFlag() { return "--backend=" + TestBackend(); }

template <typename T>
std::vector<T> RandomValues(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<T> dist(T(-1), T(1));
  std::vector<T> v(count);
  for (T& x : v) x = dist(rng);
  return v;
}

}  // namespace gpucompute::testing
