#include "server/shared_memory_flags.h"

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gpucompute/common/flag_checks.h"
#include "server/ops/log.h"

ABSL_FLAG(bool, allow_shared_memory, false,
          "let clients on this host register POSIX shared-memory objects (RegisterSharedMemory) "
          "and pass matrices and results through them; the server maps each object read-write "
          "and pins it for DMA. Any client that can call the server may then name any object "
          "the server's user can open: gate the calls (unix socket permissions, a token)");
ABSL_FLAG(int32_t, shared_memory_max_regions, 256,
          "most shared-memory regions registered at once (1 to 65536)");
ABSL_FLAG(int64_t, shared_memory_max_bytes, -1,
          "most bytes of shared memory registered at once, 1 or more; pinned pages are locked "
          "in RAM (-1: half of the host's physical memory)");

namespace gpucompute::server {
namespace {

constexpr int32_t kMaxRegionsFlag = 65536;

}  // namespace

absl::Status CheckSharedMemoryFlags() {
  if (absl::Status s = common::CheckFlagRange("shared_memory_max_regions",
                                              absl::GetFlag(FLAGS_shared_memory_max_regions), 1,
                                              kMaxRegionsFlag);
      !s.ok()) {
    return s;
  }
  const int64_t bytes = absl::GetFlag(FLAGS_shared_memory_max_bytes);
  if (bytes != -1 && bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shared_memory_max_bytes: must be 1 or more, or -1 for half the host's memory; got ",
        bytes));
  }
  return absl::OkStatus();
}

std::unique_ptr<SharedMemoryRegistry> SharedMemoryFromFlags(Device* pinner) {
  if (!absl::GetFlag(FLAGS_allow_shared_memory)) {
    LogInfo("shared memory: off (--allow_shared_memory turns it on)");
    return nullptr;
  }
  SharedMemoryOptions options;
  options.max_regions = absl::GetFlag(FLAGS_shared_memory_max_regions);
  options.max_bytes = absl::GetFlag(FLAGS_shared_memory_max_bytes);
  if (options.max_bytes < 0) {
    options.max_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGESIZE)) / 2;
  }
  LogInfo(absl::StrCat("shared memory: on, up to ", options.max_regions, " regions and ",
                       options.max_bytes, " bytes"));
  return std::make_unique<SharedMemoryRegistry>(options, pinner);
}

}  // namespace gpucompute::server
