// Bounds of a numeric flag, checked at start-up, with the message every
// binary of this project gives: the flag, the range and the value.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpucompute::common {

// OK when `low` <= `value` <= `high`; else "--FLAG: must be LOW to HIGH, got VALUE".
absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t low, int64_t high);

// OK when `value` >= `low`; else "--FLAG: must be LOW or more, got VALUE".
absl::Status CheckFlagAtLeast(absl::string_view flag, int64_t value, int64_t low);

}  // namespace gpucompute::common
