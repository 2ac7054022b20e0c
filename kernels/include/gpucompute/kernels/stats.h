// The one statistic timings are summarised by, so that what "auto" ranks by
// is what Profile and the bench show.
#pragma once

#include <algorithm>
#include <vector>

namespace gpucompute::kernels {

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

}  // namespace gpucompute::kernels
