// A hint to the core that this is a spin loop (less power, and the other
// hyperthread of the core runs faster meanwhile). A no-op where the
// architecture has no such hint.
#pragma once

namespace gpucompute::common {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace gpucompute::common
