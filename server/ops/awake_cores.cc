#include "server/ops/awake_cores.h"

#include <pthread.h>
#include <sched.h>

#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "gpucompute/common/cpu_relax.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::server {
namespace {

// The calling thread on `cpu` alone, in the scheduling class below every
// other (best effort: where refused, it still spins, at its priority).
void PinAndYieldToEveryone(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
}

}  // namespace

AwakeCores::AwakeCores(absl::Duration linger, std::function<Activity()> activity)
    : linger_(linger), activity_(std::move(activity)) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &allowed)) spinners_.emplace_back([this, cpu] { Spin(cpu); });
  }
  watcher_ = std::thread([this] { Watch(); });
}

AwakeCores::~AwakeCores() {
  stopping_.store(true);
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  for (std::thread& t : spinners_) t.join();
}

void AwakeCores::SetAwake(bool awake) {
  absl::MutexLock lock(&mu_);
  awake_ = awake;
  awake_flag_.store(awake, std::memory_order_relaxed);
}

// Polls the activity: every 50 us while the cores are kept awake (their
// spinners keep this thread's core awake too), every millisecond while they
// rest, so that a call after a long pause starts them within a millisecond.
void AwakeCores::Watch() {
  common::NameThisThread("awake-watch");
  Activity last = activity_();
  absl::Time until = absl::InfinitePast();
  while (!stopping_.load()) {
    const Activity now_seen = activity_();
    const absl::Time now = absl::Now();
    if (now_seen.in_flight > 0 || now_seen.started != last.started) until = now + linger_;
    last = now_seen;
    const bool awake = now < until && now_seen.in_flight <= busy_calls();
    if (awake != awake_flag_.load(std::memory_order_relaxed)) SetAwake(awake);
    absl::SleepFor(awake ? absl::Microseconds(50) : absl::Milliseconds(1));
  }
}

void AwakeCores::Spin(int cpu) {
  common::NameThisThread("awake" + std::to_string(cpu));
  PinAndYieldToEveryone(cpu);
  for (;;) {
    if (!awake_flag_.load(std::memory_order_relaxed)) {
      mu_.LockWhen(absl::Condition(this, &AwakeCores::AwakeOrStopped));
      const bool stop = stop_;
      mu_.Unlock();
      if (stop) return;
    }
    for (int i = 0; i < 64; ++i) common::CpuRelax();
    if (stopping_.load(std::memory_order_relaxed)) return;
  }
}

}  // namespace gpucompute::server
