// Host allocation tuned for large payloads. glibc serves every allocation
// above 32 MiB with a fresh mmap and returns it with munmap, so each 64 MiB
// request or response pays a page fault per 4 KiB page (tens of
// milliseconds) before a byte is copied. Keeping such blocks in the heap
// lets the next message reuse pages that are already mapped.
#pragma once

namespace gpucompute::common {

// glibc's malloc only (other allocators ignore mallopt). Call once at
// start-up, before threads start. Freed memory stays with the process for
// reuse instead of going back to the system.
void RetainLargeHostAllocations();

}  // namespace gpucompute::common
