#include "server/engine/scheduler.h"

#include "absl/strings/str_cat.h"

namespace gpucompute::server {

Scheduler::Scheduler(std::vector<std::unique_ptr<Device>> devices, int max_queue_depth)
    : devices_(std::move(devices)), max_queue_depth_(max_queue_depth) {
  for (const auto& device : devices_) {
    auto lane = std::make_unique<Lane>();
    lane->device = device.get();
    for (int i = 0; i < device->concurrency(); ++i) {
      lane->workers.emplace_back([this, l = lane.get()] { WorkerLoop(*l); });
    }
    lanes_.push_back(std::move(lane));
  }
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Submit(Task task) {
  if (!accepting_.load()) {
    task.done(absl::UnavailableError("server shutting down: not accepting new work"), nullptr, 0);
    return;
  }
  // Least loaded: fewest queued + running tasks.
  Lane* best = nullptr;
  int64_t best_load = 0;
  for (const auto& lane : lanes_) {
    if (task.device != nullptr && lane->device != task.device) continue;
    if (!lane->device->healthy()) continue;
    absl::MutexLock lock(&lane->mu);
    const int64_t load = int64_t(lane->queue.size()) + lane->running;
    if (best == nullptr || load < best_load) {
      best = lane.get();
      best_load = load;
    }
  }
  if (best == nullptr && task.device != nullptr) {
    task.done(absl::UnavailableError(absl::StrCat(
                  "device ", task.device->description().name,
                  " holding a tensor of this request is out of service after a fatal error")),
              nullptr, 0);
    return;
  }
  if (best == nullptr) {
    task.done(absl::UnavailableError("no healthy device: every device was taken out of service "
                                     "after a fatal error"),
              nullptr, 0);
    return;
  }
  bool stopping = false;
  {
    absl::MutexLock lock(&best->mu);
    stopping = best->stopping;
    if (int64_t(best->queue.size()) < max_queue_depth_ && !stopping) {
      best->queue.push_back(Entry{std::move(task), absl::Now()});
      best->ready.Signal();
      return;
    }
  }
  if (stopping) {
    task.done(absl::UnavailableError("server shutting down: not accepting new work"), nullptr, 0);
    return;
  }
  task.done(absl::ResourceExhaustedError(absl::StrCat(
                "admission queue full: ", max_queue_depth_, " requests already queued on ",
                best->device->description().name, " (max_queue_depth ", max_queue_depth_, ")")),
            nullptr, 0);
}

void Scheduler::RunEntry(Lane& lane, Entry& entry) {
  Task& task = entry.task;
  const absl::Time now = absl::Now();
  const int64_t queue_us = absl::ToInt64Microseconds(now - entry.enqueued);
  absl::Status status;
  if (task.cancelled && task.cancelled->load()) {
    status = absl::CancelledError("request cancelled by the client before it ran");
  } else if (now > task.deadline) {
    status = absl::DeadlineExceededError(
        absl::StrCat("deadline passed after ", queue_us, " us in the queue, before the work ran"));
  } else {
    status = task.run(*lane.device);
  }
  task.done(status, lane.device, queue_us);
}

void Scheduler::WorkerLoop(Lane& lane) {
  for (;;) {
    Entry entry;
    {
      absl::MutexLock lock(&lane.mu);
      while (lane.queue.empty() && !lane.stopping) lane.ready.Wait(&lane.mu);
      if (lane.queue.empty()) return;  // stopping and drained
      entry = std::move(lane.queue.front());
      lane.queue.pop_front();
      ++lane.running;
    }
    RunEntry(lane, entry);
    absl::MutexLock lock(&lane.mu);
    --lane.running;
  }
}

void Scheduler::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  accepting_.store(false);
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
    lane->ready.SignalAll();
  }
  for (auto& lane : lanes_) {
    for (std::thread& t : lane->workers) {
      if (t.joinable()) t.join();
    }
  }
}

int64_t Scheduler::queued() const {
  int64_t total = 0;
  for (const auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    total += int64_t(lane->queue.size());
  }
  return total;
}

int64_t Scheduler::running() const {
  int64_t total = 0;
  for (const auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    total += lane->running;
  }
  return total;
}

}  // namespace gpucompute::server
