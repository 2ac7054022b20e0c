// The progress bar on stderr (progress.h).
#include "loadtest/progress.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "loadtest/report.h"

namespace gpucompute::loadtest {

void Progress::Show(int row, int rows, const std::string& what, absl::Duration elapsed,
                    absl::Duration limit, int windows, const WindowStats* last) {
  if (!enabled_) return;
  constexpr int kWidth = 24;
  const double done = (row + std::min(1.0, absl::FDivDuration(elapsed, limit))) / rows;
  const int filled = static_cast<int>(done * kWidth);
  std::string bar = std::string(filled, '=') + (filled < kWidth ? ">" : "") +
                    std::string(std::max(0, kWidth - filled - 1), ' ');
  std::string status = absl::StrFormat("warm-up %.0fs", absl::ToDoubleSeconds(elapsed));
  if (last != nullptr) {
    status = absl::StrFormat("window %d: %.1f req/s, p95 %s", windows, last->Throughput(),
                             FormatMicros(last->Percentile(95) / 1000.0));
  } else if (windows > 0) {
    status = absl::StrFormat("window %d", windows + 1);
  }
  std::fprintf(stderr, "\r\033[K[%s] %d/%d %s  %s", bar.c_str(), row + 1, rows, what.c_str(),
               status.c_str());
  std::fflush(stderr);
}

void Progress::Clear() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace gpucompute::loadtest
