// Minimal timestamped logging to stderr (this abseil release has no absl/log).
#pragma once

#include <string>

namespace gpucompute::server {

void LogInfo(const std::string& message);
void LogError(const std::string& message);

}  // namespace gpucompute::server
