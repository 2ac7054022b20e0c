#include "server/ops/log.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gpucompute::server {
namespace {

std::atomic<int> min_level{int(LogLevel::kInfo)};

absl::Mutex access_mu;
FILE* access_log ABSL_GUARDED_BY(access_mu) = nullptr;
std::atomic<bool> access_enabled{false};

std::string Now() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
}

void Write(LogLevel level, const char* name, const std::string& message) {
  if (int(level) < min_level.load(std::memory_order_relaxed)) return;
  // One fprintf per line: stdio locks the stream, so lines never interleave.
  std::fprintf(stderr, "%s %s %s\n", Now().c_str(), name, message.c_str());
  std::fflush(stderr);
}

}  // namespace

absl::Status SetLogLevel(const std::string& name) {
  if (name == "info") {
    min_level = int(LogLevel::kInfo);
  } else if (name == "warning") {
    min_level = int(LogLevel::kWarning);
  } else if (name == "error") {
    min_level = int(LogLevel::kError);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--log_level: must be info, warning or error, got \"", name, "\""));
  }
  return absl::OkStatus();
}

void LogInfo(const std::string& message) { Write(LogLevel::kInfo, "INFO", message); }
void LogWarning(const std::string& message) { Write(LogLevel::kWarning, "WARNING", message); }
void LogError(const std::string& message) { Write(LogLevel::kError, "ERROR", message); }

absl::Status OpenAccessLog(const std::string& path) {
  absl::MutexLock lock(&access_mu);
  if (access_log != nullptr && access_log != stderr) std::fclose(access_log);
  access_log = nullptr;
  if (path == "-") {
    access_log = stderr;
  } else if (!path.empty()) {
    access_log = std::fopen(path.c_str(), "a");
    if (access_log == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--access_log: cannot open \"", path, "\": ", std::strerror(errno)));
    }
  }
  access_enabled = access_log != nullptr;
  return absl::OkStatus();
}

bool AccessLogEnabled() { return access_enabled.load(std::memory_order_relaxed); }

void LogAccess(const std::string& line) {
  absl::MutexLock lock(&access_mu);
  if (access_log == nullptr) return;
  std::fprintf(access_log, "%s %s\n", Now().c_str(), line.c_str());
  std::fflush(access_log);
}

}  // namespace gpucompute::server
