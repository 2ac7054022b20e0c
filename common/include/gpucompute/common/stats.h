// The statistics timings are summarised by, defined once so that what
// "auto" ranks by is what Profile, the bench and the load test show.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace gpucompute::common {

// The true median: the middle value, or the mean of the two middle values
// for an even count. 0 for no values.
template <typename T>
double Median(std::vector<T> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = double(values[mid]);
  if (values.size() % 2 == 1) return upper;
  const double lower = double(*std::max_element(values.begin(), values.begin() + mid));
  return (lower + upper) / 2;
}

// Nearest rank: the index of the smallest of `count` sorted values with at
// least `p` percent of them at or below it. p <= 0 gives the first, p >= 100
// the last. `count` must not be 0.
inline size_t NearestRankIndex(size_t count, double p) {
  const double rank = std::ceil(p / 100.0 * double(count));
  return size_t(std::clamp(rank, 1.0, double(count))) - 1;
}

// The p-th percentile (nearest rank) of values sorted ascending; T{} for none.
template <typename T>
T PercentileOfSorted(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return T{};
  return sorted[NearestRankIndex(sorted.size(), p)];
}

// The p-th percentile (nearest rank) of values in any order; T{} for none.
template <typename T>
T Percentile(std::vector<T> values, double p) {
  if (values.empty()) return T{};
  const size_t at = NearestRankIndex(values.size(), p);
  std::nth_element(values.begin(), values.begin() + at, values.end());
  return values[at];
}

}  // namespace gpucompute::common
