// Admission and dispatch: a bounded queue per device, worker threads that
// run tasks on it, least-loaded placement, and deadline/cancellation checks
// before work starts.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/device.h"

namespace gpucompute::server {

struct Task {
  // Runs on one of the chosen device's workers.
  std::function<absl::Status(Device&)> run;
  // Called exactly once: with run's status, or why the task never ran
  // (RESOURCE_EXHAUSTED, UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED). `device`
  // is null when no device was chosen.
  std::function<void(absl::Status status, Device* device, int64_t queue_us)> done;
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<std::atomic<bool>> cancelled;  // optional
  // Runs on this device (one holding a tensor the task reads) instead of the
  // least-loaded one; null: any.
  Device* device = nullptr;
};

class Scheduler {
 public:
  Scheduler(std::vector<std::unique_ptr<Device>> devices, int max_queue_depth);
  ~Scheduler();

  // Queues the task on its device, or else on the least-loaded one.
  void Submit(Task task);
  // Refuses new tasks (UNAVAILABLE), lets queued and running ones finish, and
  // joins the workers. Idempotent.
  void Shutdown();

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  int64_t queued() const;
  int64_t running() const;

 private:
  struct Entry {
    Task task;
    absl::Time enqueued;
  };
  struct Lane {
    Device* device = nullptr;
    mutable absl::Mutex mu;
    absl::CondVar ready;
    std::deque<Entry> queue ABSL_GUARDED_BY(mu);
    int running ABSL_GUARDED_BY(mu) = 0;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    std::vector<std::thread> workers;
  };

  void WorkerLoop(Lane& lane);
  static void RunEntry(Lane& lane, Entry& entry);

  const std::vector<std::unique_ptr<Device>> devices_;
  const int max_queue_depth_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<bool> accepting_{true};
  absl::Mutex shutdown_mu_;
};

}  // namespace gpucompute::server
