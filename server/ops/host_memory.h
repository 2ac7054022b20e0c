// How the server's host memory is kept and given back. The server links
// jemalloc: with glibc's malloc in one arena, every thread's allocations
// waited on one lock, the first cap on small requests per second, and
// jemalloc gives back what idle connections held, where tcmalloc kept 8-10
// MB of 500 closed connections (bench/results/small-requests.md). Under glibc (sanitizer
// builds, GPUCOMPUTE_ALLOCATOR=glibc), which serves every allocation above
// 32 MiB with a fresh mmap and returns it with munmap, each large request or
// response would pay a page fault per 4 KiB page before a byte is copied:
// the server keeps such blocks in its heap while it is busy. Whatever the
// allocator, the server hands free memory back to the system once idle.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace gpucompute::server {

// The allocator serving this process's malloc (linked, or preloaded).
enum class HostAllocator { kGlibc, kJemalloc, kTcmalloc };
HostAllocator ServingAllocator();
const char* HostAllocatorName(HostAllocator allocator);

// Call once at start-up, before threads start. glibc only.
void KeepLargeAllocationsInHeap();

// Returns free heap pages to the system: jemalloc purges its arenas,
// tcmalloc releases its free spans, glibc trims (malloc_trim).
void ReturnFreeHeapToSystem();

// Every `period` in which nothing happened (the activity count did not move
// and nothing is in flight), returns free heap memory to the system; the
// first such period of an idle spell also calls `release` (for pools the
// caller keeps). Later periods of the spell trim again: connections open and
// close without a call (each holds buffers while open), and what they free
// would otherwise stay resident until the next call.
class IdleMemoryTrimmer {
 public:
  struct Activity {
    int64_t started = 0;    // calls begun so far
    int64_t in_flight = 0;  // calls not yet finished
  };
  IdleMemoryTrimmer(absl::Duration period, std::function<Activity()> activity,
                    std::function<void()> release);
  ~IdleMemoryTrimmer();  // stops the thread

 private:
  void Loop();

  const absl::Duration period_;
  const std::function<Activity()> activity_;
  const std::function<void()> release_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace gpucompute::server
