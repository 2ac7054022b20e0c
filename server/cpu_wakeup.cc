#include "server/cpu_wakeup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::server {

absl::StatusOr<std::unique_ptr<CpuWakeupLatency>> CpuWakeupLatency::Hold(int32_t microseconds,
                                                                         const std::string& path) {
  if (microseconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu_wakeup_latency_us: must be 0 or more, got ", microseconds));
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--cpu_wakeup_latency_us: cannot open ", path, ": ", std::strerror(errno),
        " (it needs root, or a container given the device; -1 leaves the host as it is)"));
  }
  // The kernel reads a binary 32-bit value in microseconds.
  if (write(fd, &microseconds, sizeof(microseconds)) != ssize_t(sizeof(microseconds))) {
    const int error = errno;
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("--cpu_wakeup_latency_us: cannot write ", path, ": ", std::strerror(error)));
  }
  return std::unique_ptr<CpuWakeupLatency>(new CpuWakeupLatency(fd));
}

CpuWakeupLatency::~CpuWakeupLatency() { close(fd_); }

}  // namespace gpucompute::server
