#include "gpucompute/common/host_memory.h"

#include <malloc.h>

namespace gpucompute::common {

void RetainLargeHostAllocations() {
  mallopt(M_MMAP_MAX, 0);              // large blocks come from the heap...
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // ...which is not shrunk after each free
}

}  // namespace gpucompute::common
