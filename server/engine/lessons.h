// The lessons a Profile measures: pairs of kernel variants of one op that
// differ by one idea (coalescing, bank conflicts, tiling, ...). Each is
// declared on the ladder row of the variant with the idea
// (kernels::Variant::lesson); a Profile reports each pair whose two variants
// both ran ok.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "gpucompute/kernels/variant.h"
#include "server/engine/hardware_counters.h"

namespace gpucompute::server {

// One variant's result in a Profile.
struct TimedVariant {
  const kernels::Variant* variant = nullptr;
  bool ok = false;
  double median_us = 0;
  std::vector<CounterValue> counters;  // empty when none were read
};

struct MeasuredLesson {
  // The variant with the idea; its lesson names the variant before.
  const kernels::Variant* after = nullptr;
  double time_ratio = 0;  // before's median / after's median
  // The lesson's counter in both variants, when both read it.
  bool has_counter = false;
  double counter_before = 0;
  double counter_after = 0;
  // The counter moved the way the idea predicts (or stayed put where the
  // idea keeps it, e.g. no bank conflicts before or after).
  bool counter_as_predicted = false;
};

// The lessons of `variants` whose two variants are both there, ok, with a
// positive median, in ladder order of the variants that teach them.
std::vector<MeasuredLesson> MeasureLessons(absl::Span<const TimedVariant> variants);

}  // namespace gpucompute::server
