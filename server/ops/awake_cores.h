// Keeps the cores the server may run on from going idle while calls are in
// flight and for a while after the last one (--keep_cores_awake_us). On a
// virtual machine an idle vCPU halts, and the host takes tens to hundreds of
// microseconds to run it again when a packet or a wake-up reaches it; a call
// that follows a long one, or comes after a pause, pays that at each hop
// (bench/results/small-requests.md, "After an idle gap"). One spinner thread per core of
// the process's affinity mask, pinned there, of scheduling class SCHED_IDLE:
// any other runnable thread of the system takes the core from it at once.
// They rest while more calls are in flight than a quarter of the cores:
// the cores are busy then, and spinners on them only take from the real
// threads (at c=64 on an H200 host they cost 40% of small-call
// throughput). It costs every core while the server is lightly loaded, so
// it is off by default.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gpucompute::server {

class AwakeCores {
 public:
  struct Activity {
    int64_t started = 0;    // calls begun so far
    int64_t in_flight = 0;  // calls not yet finished
  };
  // Keeps the cores busy while `activity` shows a call in flight or a new
  // one, and for `linger` after, unless more than busy_calls() are in
  // flight; `activity` is polled from a thread of its own and must be cheap
  // (a few atomic loads).
  AwakeCores(absl::Duration linger, std::function<Activity()> activity);
  ~AwakeCores();  // stops and joins every thread
  AwakeCores(const AwakeCores&) = delete;
  AwakeCores& operator=(const AwakeCores&) = delete;

  // How many cores have a spinner.
  int cores() const { return static_cast<int>(spinners_.size()); }
  // Calls in flight above which the spinners rest: a quarter of the cores.
  int64_t busy_calls() const { return std::max<int64_t>(1, cores() / 4); }
  // Whether the spinners spin now.
  bool awake() const { return awake_flag_.load(std::memory_order_relaxed); }

 private:
  void Watch();
  void Spin(int cpu);
  void SetAwake(bool awake);
  bool AwakeOrStopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return awake_ || stop_; }

  const absl::Duration linger_;
  const std::function<Activity()> activity_;
  absl::Mutex mu_;
  bool awake_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> awake_flag_{false};  // awake_, read by spinning threads without the lock
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> spinners_;
  std::thread watcher_;
};

}  // namespace gpucompute::server
