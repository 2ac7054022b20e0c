#include "server/ops/host_memory.h"

#include <dlfcn.h>
#include <malloc.h>

namespace gpucompute::server {
namespace {

// gperftools' tcmalloc, when it serves this process (the server links it;
// see server/CMakeLists.txt), returns free pages through its own call.
using ReleaseFreeMemoryFn = void (*)();
ReleaseFreeMemoryFn TcmallocRelease() {
  static const auto fn = reinterpret_cast<ReleaseFreeMemoryFn>(
      dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
  return fn;
}

}  // namespace

bool TcmallocServesMalloc() { return TcmallocRelease() != nullptr; }

void KeepLargeAllocationsInHeap() {
  // tcmalloc keeps freed spans of every size in its page heap already, and
  // has no arenas: glibc's settings below would only cost it nothing.
  if (TcmallocServesMalloc()) return;
  mallopt(M_MMAP_MAX, 0);              // large blocks come from the heap...
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // ...which is not shrunk after each free...
  // ...and is one heap. Per-thread arenas keep their freed tops, which
  // malloc_trim cannot return (measured on the CPU backend after 64 MiB
  // transposes: idle RSS 2.2x the start with glibc's arenas, 1.01x with one);
  // small allocations still come from each thread's own cache.
  mallopt(M_ARENA_MAX, 1);
}

void ReturnFreeHeapToSystem() {
  if (ReleaseFreeMemoryFn release = TcmallocRelease()) {
    release();
  } else {
    malloc_trim(0);
  }
}

IdleMemoryTrimmer::IdleMemoryTrimmer(absl::Duration period, std::function<Activity()> activity,
                                     std::function<void()> release)
    : period_(period), activity_(std::move(activity)), release_(std::move(release)) {
  thread_ = std::thread([this] { Loop(); });
}

IdleMemoryTrimmer::~IdleMemoryTrimmer() {
  stop_.Notify();
  thread_.join();
}

void IdleMemoryTrimmer::Loop() {
  Activity last = activity_();
  bool released = false;
  while (!stop_.WaitForNotificationWithTimeout(period_)) {
    const Activity now = activity_();
    const bool idle = now.in_flight == 0 && now.started == last.started;
    if (!idle) released = false;
    if (idle) {
      if (!released && release_) release_();
      released = true;
      // Cheap when there is little to return (a walk of the free chunks).
      ReturnFreeHeapToSystem();
    }
    last = now;
  }
}

}  // namespace gpucompute::server
