// The lessons a Profile measures: pairs of kernel variants of one op that
// differ by one idea (coalescing, bank conflicts, tiling, ...). The one table
// of those pairs; a Profile reports each pair whose two variants both ran ok.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "gpucompute/kernels/problem.h"
#include "server/engine/hardware_counters.h"

namespace gpucompute::server {

struct Lesson {
  kernels::Op op;
  std::string_view idea;    // short name, e.g. "coalescing"
  std::string_view lesson;  // one line: what the idea changes
  std::string_view before;  // the variant without the idea
  std::string_view after;   // the variant with it
  // The hardware counter (a metric of ProfileCounters) that explains the
  // difference, and which way the idea should move it.
  std::string_view counter;
  bool counter_rises = false;  // false: the idea lowers it
};

// Every pair, in the order a Profile reports them.
absl::Span<const Lesson> Lessons();

// One variant's result in a Profile.
struct TimedVariant {
  std::string name;
  bool ok = false;
  double median_us = 0;
  std::vector<CounterValue> counters;  // empty when none were read
};

struct MeasuredLesson {
  const Lesson* lesson = nullptr;
  double time_ratio = 0;  // before's median / after's median
  // The lesson's counter in both variants, when both read it.
  bool has_counter = false;
  double counter_before = 0;
  double counter_after = 0;
  // The counter moved the way the idea predicts (or stayed put where the
  // idea keeps it, e.g. no bank conflicts before or after).
  bool counter_as_predicted = false;
};

// The lessons of `op` whose two variants are both ok with a positive median
// in `variants`, in table order.
std::vector<MeasuredLesson> MeasureLessons(kernels::Op op, absl::Span<const TimedVariant> variants);

}  // namespace gpucompute::server
