// How the server's heap treats large blocks. glibc serves every allocation
// above 32 MiB with a fresh mmap and returns it with munmap, so each large
// request or response would pay a page fault per 4 KiB page before a byte is
// copied. The server keeps such blocks in its heap for the next message.
#pragma once

namespace gpucompute::server {

// Call once at start-up, before threads start.
void KeepLargeAllocationsInHeap();

}  // namespace gpucompute::server
