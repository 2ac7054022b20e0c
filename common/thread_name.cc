#include "gpucompute/common/thread_name.h"

#include <pthread.h>

namespace gpucompute::common {

namespace {
constexpr size_t kMaxNameBytes = 15;  // the kernel's 16-byte comm, its last byte a zero
}  // namespace

void NameThisThread(std::string_view name) {
#if defined(__linux__)
  const std::string kept(name.substr(0, kMaxNameBytes));
  pthread_setname_np(pthread_self(), kept.c_str());
#else
  (void)name;
#endif
}

std::string ThisThreadName() {
#if defined(__linux__)
  char name[kMaxNameBytes + 1] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0) return "";
  return name;
#else
  return "";
#endif
}

}  // namespace gpucompute::common
