// Timestamped logging to stderr (this abseil release has no absl/log), with
// a minimum level, and an optional access log of one line per call.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace gpucompute::server {

enum class LogLevel { kInfo = 0, kWarning = 1, kError = 2 };

// "info", "warning" or "error".
absl::Status SetLogLevel(const std::string& name);

void LogInfo(const std::string& message);
void LogWarning(const std::string& message);
void LogError(const std::string& message);

// Where the access log goes: a file (appended), "-" for stderr, "" for off.
absl::Status OpenAccessLog(const std::string& path);
bool AccessLogEnabled();
// One line, timestamped.
void LogAccess(const std::string& line);

}  // namespace gpucompute::server
