#include "server/ops/host_memory.h"

#include <dlfcn.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "gpucompute/common/host_memory.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::server {
namespace {

// What the allocator of this process offers to give memory back, found by
// name: the build links one (server/CMakeLists.txt) and LD_PRELOAD may put
// another in front.
using MallctlFn = int (*)(const char*, void*, size_t*, void*, size_t);
using ReleaseFreeMemoryFn = void (*)();

HostAllocator FindHostAllocator() {
  // The library that defines the malloc this process calls.
  Dl_info info{};
  void* const malloc_address = reinterpret_cast<void*>(&malloc);
  if (dladdr(malloc_address, &info) == 0 || info.dli_fname == nullptr) return HostAllocator::kGlibc;
  if (std::strstr(info.dli_fname, "jemalloc") != nullptr) return HostAllocator::kJemalloc;
  if (std::strstr(info.dli_fname, "tcmalloc") != nullptr) return HostAllocator::kTcmalloc;
  return HostAllocator::kGlibc;
}

}  // namespace

HostAllocator ServingAllocator() {
  static const HostAllocator allocator = FindHostAllocator();
  return allocator;
}

const char* HostAllocatorName(HostAllocator allocator) {
  switch (allocator) {
    case HostAllocator::kJemalloc: return "jemalloc";
    case HostAllocator::kTcmalloc: return "tcmalloc";
    case HostAllocator::kGlibc: break;
  }
  return "glibc malloc, one arena";
}

void KeepLargeAllocationsInHeap() {
  // jemalloc and tcmalloc keep freed blocks of every size for reuse and
  // have no arena lock to share: glibc's settings below are glibc's alone.
  if (ServingAllocator() != HostAllocator::kGlibc) return;
  // Large blocks come from the heap, which is not shrunk after each free...
  common::RetainLargeHostAllocations();
  // ...and is one heap. Per-thread arenas keep their freed tops, which
  // malloc_trim cannot return (measured on the CPU backend after 64 MiB
  // transposes: idle RSS 2.2x the start with glibc's arenas, 1.01x with one);
  // small allocations still come from each thread's own cache.
  mallopt(M_ARENA_MAX, 1);
}

void ReturnFreeHeapToSystem() {
  switch (ServingAllocator()) {
    case HostAllocator::kJemalloc: {
      // Every arena's unused pages now, instead of over its decay time.
      static const auto mallctl = reinterpret_cast<MallctlFn>(dlsym(RTLD_DEFAULT, "mallctl"));
      if (mallctl != nullptr) mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
      return;
    }
    case HostAllocator::kTcmalloc: {
      static const auto release = reinterpret_cast<ReleaseFreeMemoryFn>(
          dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"));
      if (release != nullptr) release();
      return;
    }
    case HostAllocator::kGlibc: malloc_trim(0); return;
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
  common::NameThisThread("memory-trim");
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
