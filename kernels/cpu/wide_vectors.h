// Wide vectors where the core has them. On x86-64 with GCC or Clang,
// GPUCOMPUTE_WIDE_VECTORS marks a function compiled for x86-64-v3 (AVX2,
// FMA); a caller runs it only where WideVectorsHere() says the core can,
// and a baseline (SSE2) version otherwise. The release binary stays
// portable and still uses the wide vectors of the hosts it runs on.
// Elsewhere, or where the build defines GPUCOMPUTE_BASELINE_VECTORS_ONLY
// (a test of the baseline code), only the baseline exists.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(GPUCOMPUTE_BASELINE_VECTORS_ONLY)
#define GPUCOMPUTE_WIDE_VECTORS __attribute__((target("arch=x86-64-v3")))

namespace gpucompute::kernels::cpu {

// Whether this core runs x86-64-v3 code: AVX2 and FMA (asked once).
inline bool WideVectorsHere() {
  static const bool wide = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return wide;
}

}  // namespace gpucompute::kernels::cpu
#endif
