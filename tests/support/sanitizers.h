// Whether the tests run under a sanitizer, for GCC (which defines
// __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__) and clang (which answers
// __has_feature instead). Sanitizers' allocators keep memory that tests of
// resident size would count, and slow large computations several times.
#pragma once

namespace gpucompute::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

inline constexpr bool kUnderSanitizer = kAddressSanitizer || kThreadSanitizer;

}  // namespace gpucompute::testing
