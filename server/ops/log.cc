#include "server/ops/log.h"

#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpucompute::server {
namespace {

void Write(const char* level, const std::string& message) {
  const std::string when = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::fprintf(stderr, "%s %s %s\n", when.c_str(), level, message.c_str());
  std::fflush(stderr);
}

}  // namespace

void LogInfo(const std::string& message) { Write("INFO", message); }
void LogError(const std::string& message) { Write("ERROR", message); }

}  // namespace gpucompute::server
