#include "command.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace gpucompute::cli {

int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "gpucompute: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

int CallFailed(const absl::Status& status) {
  std::fprintf(stderr, "gpucompute: %s\n", std::string(status.message()).c_str());
  return kExitFailed;
}

std::vector<FlagSpec> Concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

absl::StatusOr<int64_t> ParseInt(const ParsedArgs& args, const std::string& flag, int64_t min,
                                 int64_t max) {
  int64_t v;
  if (!absl::SimpleAtoi(args.Get(flag), &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": expected an integer >= ", min,
        max == std::numeric_limits<int64_t>::max() ? "" : absl::StrCat(" and <= ", max), ", got '",
        args.Get(flag), "'"));
  }
  return v;
}

absl::StatusOr<OpShape> ParseShapeFlag(const ParsedArgs& args, const std::string& flag, v1::Op op) {
  return ParseFlag(args, flag, [op](const std::string& text) { return ParseShape(op, text); });
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (1LL << 30)) return absl::StrFormat("%.2f GiB", bytes / double(1LL << 30));
  if (bytes >= (1LL << 20)) return absl::StrFormat("%.2f MiB", bytes / double(1LL << 20));
  return absl::StrCat(bytes, " bytes");
}

void PrintSummary(const Matrix& m) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t non_finite = 0;
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t c = 0; c < m.cols(); ++c) {
      const double v = m.at(r, c);
      if (!std::isfinite(v)) {
        ++non_finite;
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
  }
  const int64_t finite = m.elements() - non_finite;
  std::printf("result    %s", m.ShapeString().c_str());
  if (finite > 0) {
    std::printf("  min %.6g  max %.6g  mean %.6g", lo, hi, sum / double(finite));
  }
  if (non_finite > 0) std::printf("  non-finite %" PRId64, non_finite);
  std::printf("\n");
  // Small results are shown whole; they are usually checks by hand.
  if (m.rows() <= 8 && m.cols() <= 8) {
    for (int64_t r = 0; r < m.rows(); ++r) {
      std::printf("          [");
      for (int64_t c = 0; c < m.cols(); ++c) std::printf("%s%12.6g", c ? " " : "", m.at(r, c));
      std::printf("]\n");
    }
  }
}

}  // namespace gpucompute::cli
