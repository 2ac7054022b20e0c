#include "gpucompute/common/flag_checks.h"

#include "absl/strings/str_cat.h"

namespace gpucompute::common {

absl::Status CheckFlagRange(absl::string_view flag, int64_t value, int64_t low, int64_t high) {
  if (value >= low && value <= high) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": must be ", low, " to ", high, ", got ", value));
}

absl::Status CheckFlagAtLeast(absl::string_view flag, int64_t value, int64_t low) {
  if (value >= low) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": must be ", low, " or more, got ", value));
}

}  // namespace gpucompute::common
