// ThreadSanitizer and Debian's abseil. The distribution's libabsl is built
// without TSan, so TSan never sees absl::Mutex, CondVar or Notification hand
// memory from one thread to the next, and reports every access they guard as
// a race. Linked into each executable of the `tsan` preset only, this file
// defines the abseil functions this project calls: each runs the library's
// own (found with dlsym(RTLD_NEXT)) and tells TSan the happens-before edge it
// made (__tsan_release before a lock is let go, __tsan_acquire after it is
// taken). Calls made inside abseil itself are not affected.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define GPUCOMPUTE_STRINGIZE2(x) #x
#define GPUCOMPUTE_STRINGIZE(x) GPUCOMPUTE_STRINGIZE2(x)

// The library's definition of absl::<inline namespace>::<rest>, by its mangled
// name: `rest` is what follows the namespaces, e.g. "5Mutex4LockEv".
template <typename Fn>
Fn Next(bool const_member, const char* rest) {
  const std::string ns = GPUCOMPUTE_STRINGIZE(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string symbol =
      std::string(const_member ? "_ZNK4absl" : "_ZN4absl") + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, symbol.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_abseil_sync: %s not found in abseil\n", symbol.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

void* Sync(const void* object) { return const_cast<void*>(object); }

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto next = Next<void (*)(Mutex*)>(false, "5Mutex4LockEv");
  next(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto next = Next<void (*)(Mutex*)>(false, "5Mutex6UnlockEv");
  __tsan_release(this);
  next(this);
}

void Mutex::ReaderLock() {
  static auto next = Next<void (*)(Mutex*)>(false, "5Mutex10ReaderLockEv");
  next(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto next = Next<void (*)(Mutex*)>(false, "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  next(this);
}

void Mutex::Await(const Condition& cond) {
  static auto next =
      Next<void (*)(Mutex*, const Condition&)>(false, "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);  // the wait lets the mutex go
  next(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto next = Next<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      false, "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = next(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto next = Next<bool (*)(Mutex*, const Condition&, absl::Time)>(
      false, "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool met = next(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

void Mutex::LockWhen(const Condition& cond) {
  static auto next =
      Next<void (*)(Mutex*, const Condition&)>(false, "5Mutex8LockWhenERKNS0_9ConditionE");
  next(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto next = Next<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      false, "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = next(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto next = Next<bool (*)(Mutex*, const Condition&, absl::Time)>(
      false, "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool met = next(this, cond, deadline);
  __tsan_acquire(this);
  return met;
}

bool Mutex::TryLock() {
  static auto next = Next<bool (*)(Mutex*)>(false, "5Mutex7TryLockEv");
  const bool locked = next(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto next = Next<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      false, "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = next(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto next = Next<bool (*)(CondVar*, Mutex*, absl::Time)>(
      false, "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = next(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

void CondVar::Wait(Mutex* mu) {
  static auto next = Next<void (*)(CondVar*, Mutex*)>(false, "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  next(this, mu);
  __tsan_acquire(mu);
}

void Notification::Notify() {
  static auto next = Next<void (*)(Notification*)>(false, "12Notification6NotifyEv");
  __tsan_release(this);
  next(this);
}

void Notification::WaitForNotification() const {
  static auto next =
      Next<void (*)(const Notification*)>(true, "12Notification19WaitForNotificationEv");
  next(this);
  __tsan_acquire(Sync(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto next = Next<bool (*)(const Notification*, absl::Duration)>(
      true, "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = next(this, timeout);
  if (notified) __tsan_acquire(Sync(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
