// The lessons a Profile measures: pairs of kernel variants of one op that
// differ by one idea (coalescing, bank conflicts, tiling, ...). The one table
// of those pairs; a Profile reports each pair whose two variants both ran ok.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "gpucompute/kernels/problem.h"

namespace gpucompute::server {

struct Lesson {
  kernels::Op op;
  std::string_view idea;    // short name, e.g. "coalescing"
  std::string_view lesson;  // one line: what the idea changes
  std::string_view before;  // the variant without the idea
  std::string_view after;   // the variant with it
  // The Nsight Compute metric expected to explain the difference. Not read
  // by any build yet: Profile's Comparison.counter stays empty until it is.
  std::string_view counter;
};

// Every pair, in the order a Profile reports them.
absl::Span<const Lesson> Lessons();

// One variant's result in a Profile.
struct TimedVariant {
  std::string name;
  bool ok = false;
  double median_us = 0;
};

struct MeasuredLesson {
  const Lesson* lesson = nullptr;
  double time_ratio = 0;  // before's median / after's median
};

// The lessons of `op` whose two variants are both ok with a positive median
// in `variants`, in table order.
std::vector<MeasuredLesson> MeasureLessons(kernels::Op op, absl::Span<const TimedVariant> variants);

}  // namespace gpucompute::server
