#include "server/engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "gpucompute/common/cpu_relax.h"
#include "gpucompute/common/thread_name.h"

namespace gpucompute::server {
namespace {

// Why a task that waited `queue_us` must not run now, or OK.
absl::Status NotWantedAnyMore(const Task& task, absl::Time now, int64_t queue_us) {
  if (task.cancelled && task.cancelled->load()) {
    return absl::CancelledError("request cancelled by the client before it ran");
  }
  if (now > task.deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("deadline passed after ", queue_us, " us in the queue, before the work ran"));
  }
  return absl::OkStatus();
}

// Answers a task, having let go of what its work held (its call: tensors it
// read, buffers): a client that has its answer may release a tensor and at
// once reuse the bytes it held in the tensor budget.
void Answer(Task& task, const absl::Status& status, Device* device, int64_t queue_us) {
  task.run = nullptr;
  task.batch.reset();
  task.done(status, device, queue_us);
}

// Batches a submitting thread runs from the queue after its own task
// before it returns to gRPC (and wakes a worker for what is left).
constexpr int kMaxInlineRounds = 8;

StopRequested StopOf(const Task& task) {
  return [cancelled = task.cancelled, deadline = task.deadline] {
    return (cancelled && cancelled->load()) || absl::Now() > deadline;
  };
}

}  // namespace

Scheduler::Scheduler(std::vector<std::unique_ptr<Device>> devices, int max_queue_depth,
                     BatchingOptions batching, absl::Duration worker_spin, int answer_threads,
                     int inline_threads)
    : devices_(std::move(devices)),
      max_queue_depth_(max_queue_depth),
      batching_(batching),
      worker_spin_(worker_spin),
      inline_threads_(inline_threads) {
  for (int i = 0; i < answer_threads; ++i) {
    answer_threads_.emplace_back([this, i] {
      common::NameThisThread(absl::StrCat("answer", i));
      AnswerLoop();
    });
  }
  for (const auto& device : devices_) {
    auto lane = std::make_unique<Lane>();
    lane->device = device.get();
    for (int i = 0; i < device->concurrency(); ++i) {
      // "worker<device>.<n>": the lane's index among the devices.
      lane->workers.emplace_back(
          [this, l = lane.get(), name = absl::StrCat("worker", lanes_.size(), ".", i)] {
            common::NameThisThread(name);
            WorkerLoop(*l);
          });
    }
    lanes_.push_back(std::move(lane));
  }
}

Scheduler::~Scheduler() { Shutdown(); }

bool Scheduler::Candidate(const Lane& lane, const Device* device) {
  return (device == nullptr || lane.device == device) && lane.device->healthy();
}

Scheduler::Lane* Scheduler::LeastLoadedLane(const Task& task) const {
  // Fewest queued + running tasks. With one candidate (one GPU, or the
  // task's tensor's), no lane's lock is taken to compare.
  Lane* best = nullptr;
  int candidates = 0;
  for (const auto& lane : lanes_) {
    if (!Candidate(*lane, task.device)) continue;
    ++candidates;
    best = lane.get();
  }
  if (candidates <= 1) return best;
  best = nullptr;
  int64_t best_load = 0;
  for (const auto& lane : lanes_) {
    if (!Candidate(*lane, task.device)) continue;
    absl::MutexLock lock(&lane->mu);
    const int64_t load = int64_t(lane->queue.size()) + lane->running;
    if (best == nullptr || load < best_load) {
      best = lane.get();
      best_load = load;
    }
  }
  return best;
}

void Scheduler::Submit(Task task) {
  if (!accepting_.load()) {
    Answer(task, absl::UnavailableError("server shutting down: not accepting new work"), nullptr,
           0);
    return;
  }
  Lane* best = LeastLoadedLane(task);
  if (best == nullptr && task.device != nullptr) {
    Answer(task,
           absl::UnavailableError(absl::StrCat(
               "device ", task.device->description().name,
               " holding a tensor of this request is out of service after a fatal error")),
           nullptr, 0);
    return;
  }
  if (best == nullptr) {
    Answer(task,
           absl::UnavailableError("no healthy device: every device was taken out of service "
                                  "after a fatal error"),
           nullptr, 0);
    return;
  }
  bool stopping = false;
  bool run_here = false;
  bool own_queued = false;  // run_here, behind tasks that queued first
  {
    absl::MutexLock lock(&best->mu);
    stopping = best->stopping;
    if (best->running > 0) best->last_crowded = absl::Now();
    OpenBatch* open = best->open;
    if (!stopping && open != nullptr && task.batch && task.batch->key == *open->key &&
        int(open->entries->size()) < batching_.max_batch_size) {
      // A worker holds a batch of this kind open: join it.
      open->entries->push_back(Entry{std::move(task), absl::Now()});
      ++best->running;
      open->joined.Signal();
      return;
    }
    // A small task runs here unless a worker polls for it. Workers poll
    // only while tasks reach the device one at a time: a lone caller's requests
    // then run on one warm worker (the thread gRPC hands a call to has
    // usually slept, and runs the CUDA calls cold: 155 us through the
    // poller against 208 us here, for a resident 64^3 MatMul on an H200
    // host). Under load the task runs here and this thread answers it: an
    // answer sent from another thread costs gRPC a hand-off of its own.
    // Past the inline limit a small task that may join a batch queues
    // without waking a worker: a thread running small tasks takes it (with
    // its batch mates) when its own ends, and that thread is awake already.
    // Not while those takes find no batch mates (kTakesPerVerdict): then it
    // runs here as one that never batches.
    // A task that never batches would gain nothing there but the wait: it
    // runs here while the device has a turn free (held back without
    // batching, the resident kept row lost 8% at --inline_threads=4 on an
    // H200; now that it batches, held back it gained at 64 in flight).
    const bool small = task.may_run_inline;
    const bool queue_has_room = int64_t(best->queue.size()) < max_queue_depth_;
    const bool within_inline_limit =
        !task.batch.has_value() || best->inline_busy < InlineLimit(*best) || !HoldsBack(*best);
    if (!stopping && small && !PollerFree(*best) && best->open == nullptr &&
        best->busy < best->device->concurrency() && within_inline_limit &&
        (best->queue.empty() || queue_has_room)) {
      ++best->busy;  // a worker's turn, taken on this thread
      ++best->inline_busy;
      run_here = true;
      if (best->queue.empty()) {
        ++best->running;
      } else {
        // Behind the tasks that came first: this thread takes them in order.
        best->queue.push_back(Entry{std::move(task), absl::Now()});
        best->waiting.store(int64_t(best->queue.size()), std::memory_order_relaxed);
        own_queued = true;
      }
    } else if (queue_has_room && !stopping) {
      best->queue.push_back(Entry{std::move(task), absl::Now()});
      best->waiting.store(int64_t(best->queue.size()), std::memory_order_relaxed);
      // A polling worker takes the first task queued while it polls; any
      // more wake sleeping workers as usual.
      if (best->spinning && !best->spinner_has_work.load(std::memory_order_relaxed)) {
        best->spinner_has_work.store(true, std::memory_order_release);
      } else if (!small || best->inline_busy == 0) {
        best->ready.Signal();
      }
      return;
    }
  }
  if (run_here) {
    // Queued behind others, the task is taken from the queue in its turn.
    RunSmallTasksHere(*best, own_queued ? std::nullopt : std::optional<Task>(std::move(task)));
    return;
  }
  if (stopping) {
    Answer(task, absl::UnavailableError("server shutting down: not accepting new work"), nullptr,
           0);
    return;
  }
  Answer(task,
         absl::ResourceExhaustedError(absl::StrCat(
             "admission queue full: ", max_queue_depth_, " requests already queued on ",
             best->device->description().name, " (max_queue_depth ", max_queue_depth_, ")")),
         nullptr, 0);
}

void Scheduler::RunSmallTasksHere(Lane& lane, std::optional<Task> task) {
  int ran = 0;
  if (task) {
    Entry entry{std::move(*task), absl::Now()};
    RunEntry(lane, entry, Runner::kSubmitter);
    ran = 1;
  }
  for (int round = 0;; ++round) {
    std::vector<Entry> batch;
    {
      absl::MutexLock lock(&lane.mu);
      lane.running -= ran;
      if (round == kMaxInlineRounds || !TakeSmallTasks(lane, batch)) {
        --lane.busy;
        --lane.inline_busy;
        WantPollerIfIdle(lane);
        // A worker held back by the count may go on, or one is wanted to
        // poll; waking one otherwise would cost a futex call each way.
        if (!lane.queue.empty() || lane.spin_wanted) lane.ready.Signal();
        return;
      }
    }
    RunBatch(lane, batch, Runner::kSubmitter);
    ran = int(batch.size());
  }
}

void Scheduler::RunEntry(Lane& lane, Entry& entry, Runner runner) {
  Task& task = entry.task;
  const absl::Time now = absl::Now();
  const int64_t queue_us = absl::ToInt64Microseconds(now - entry.enqueued);
  absl::Status status = NotWantedAnyMore(task, now, queue_us);
  if (status.ok()) status = task.run(*lane.device);
  Respond(lane, task, status, queue_us, runner);
}

void Scheduler::Respond(Lane& lane, Task& task, const absl::Status& status, int64_t queue_us,
                        Runner runner) {
  // Only a queue as deep as the workers are many makes the hand-off pay: at
  // 8 requests in flight on 4 workers it cost more than it freed.
  if (answer_threads_.empty() || runner == Runner::kSubmitter ||
      lane.waiting.load(std::memory_order_relaxed) < lane.device->concurrency()) {
    Answer(task, status, lane.device, queue_us);
    return;
  }
  // What the task's work held goes now, on the worker, as Answer would.
  task.run = nullptr;
  task.batch.reset();
  absl::MutexLock lock(&answers_mu_);
  answers_.push_back(Answered{std::move(task), status, lane.device, queue_us});
  answers_ready_.Signal();
}

void Scheduler::AnswerLoop() {
  for (;;) {
    Answered answered;
    {
      absl::MutexLock lock(&answers_mu_);
      while (answers_.empty() && !answers_stopping_) answers_ready_.Wait(&answers_mu_);
      if (answers_.empty()) return;  // stopping and drained
      answered = std::move(answers_.front());
      answers_.pop_front();
    }
    Answer(answered.task, answered.status, answered.device, answered.queue_us);
  }
}

void Scheduler::GatherBatch(Lane& lane, std::vector<Entry>& batch, size_t share) {
  // Moved out, not copied: a task taken into a batch is never matched by its
  // key again, and `batch` may reallocate below.
  const std::string key = std::move(batch.front().task.batch->key);
  const size_t max = size_t(batching_.max_batch_size);
  for (auto it = lane.queue.begin(); it != lane.queue.end() && batch.size() < share;) {
    if (it->task.batch && it->task.batch->key == key) {
      batch.push_back(std::move(*it));
      it = lane.queue.erase(it);
      lane.waiting.store(int64_t(lane.queue.size()), std::memory_order_relaxed);
      ++lane.running;
    } else {
      ++it;
    }
  }
  // Hold the batch open for company: one open batch per device at a time.
  if (batching_.delay <= absl::ZeroDuration() || batch.size() >= max || lane.open != nullptr) {
    return;
  }
  const absl::Time until =
      std::min(batch.front().enqueued + batching_.delay, batch.front().task.deadline);
  OpenBatch open;
  open.key = &key;
  open.entries = &batch;
  lane.open = &open;
  while (batch.size() < max && !lane.stopping) {
    if (open.joined.WaitWithDeadline(&lane.mu, until)) break;  // the delay has passed
  }
  lane.open = nullptr;
}

void Scheduler::RunBatch(Lane& lane, std::vector<Entry>& batch, Runner runner) {
  if (batch.size() == 1) {
    RunEntry(lane, batch.front(), runner);
    return;
  }
  Device& device = *lane.device;
  const absl::Time now = absl::Now();
  struct Member {
    Entry* entry;
    int64_t queue_us;
  };
  std::vector<Member> live;
  for (Entry& entry : batch) {
    const int64_t queue_us = absl::ToInt64Microseconds(now - entry.enqueued);
    if (absl::Status s = NotWantedAnyMore(entry.task, now, queue_us); !s.ok()) {
      Respond(lane, entry.task, s, queue_us, runner);
    } else {
      live.push_back({&entry, queue_us});
    }
  }
  if (live.size() == 1) {
    Task& task = live.front().entry->task;
    const absl::Status status = task.run(device);
    Respond(lane, task, status, live.front().queue_us, runner);
    return;
  }
  std::vector<ComputeJob> jobs;
  std::vector<StopRequested> stops;
  std::vector<Member> members;
  for (const Member& m : live) {
    Task& task = m.entry->task;
    auto job = task.batch->prepare(device);
    if (!job.ok()) {
      Respond(lane, task, job.status(), m.queue_us, runner);
      continue;
    }
    jobs.push_back(std::move(*job));
    stops.push_back(StopOf(task));
    members.push_back(m);
  }
  if (jobs.empty()) return;
  std::vector<absl::StatusOr<StageTimes>> results = device.ExecuteBatch(jobs, stops);
  for (size_t i = 0; i < members.size(); ++i) {
    Task& task = members[i].entry->task;
    absl::StatusOr<StageTimes> result =
        i < results.size() ? std::move(results[i])
                           : absl::InternalError("the device returned fewer results than jobs");
    const absl::Status status = task.batch->finish(std::move(result), int(jobs.size()));
    Respond(lane, task, status, members[i].queue_us, runner);
  }
}

int Scheduler::InlineLimit(const Lane& lane) const {
  const int concurrency = lane.device->concurrency();
  return inline_threads_ > 0 ? std::min(inline_threads_, concurrency)
                             : std::max(1, concurrency / 2);
}

bool Scheduler::HoldsBack(Lane& lane) {
  if (!lane.holding_back && absl::Now() >= lane.hold_back_again) {
    lane.holding_back = true;
    lane.takes = 0;
    lane.taken = 0;
  }
  return lane.holding_back;
}

void Scheduler::CountTake(Lane& lane, size_t tasks) {
  if (!lane.holding_back) return;
  ++lane.takes;
  lane.taken += int(tasks);
  if (lane.takes < kTakesPerVerdict) return;
  if (2 * lane.taken < 3 * lane.takes) {  // fewer than 1.5 tasks a take
    lane.holding_back = false;
    lane.hold_back_again = absl::Now() + lane.next_pause;
    lane.next_pause = std::min(2 * lane.next_pause, kMaxHoldBackPause);
  } else {
    lane.next_pause = kHoldBackPause;
  }
  lane.takes = 0;
  lane.taken = 0;
}

bool Scheduler::TakeSmallTasks(Lane& lane, std::vector<Entry>& batch) {
  if (lane.queue.empty() || !lane.queue.front().task.may_run_inline) return false;
  batch.push_back(std::move(lane.queue.front()));
  lane.queue.pop_front();
  lane.waiting.store(int64_t(lane.queue.size()), std::memory_order_relaxed);
  ++lane.running;
  // Never a batch held open for company: that would hold a gRPC thread.
  // Every batch mate that waits, up to a batch, not a share: small tasks
  // queue only past the inline limit, while the other inline threads are
  // busy. Split over them as a worker's share (WorkerLoop), what queued at
  // 8 requests in flight on an H200 host (4 inline threads) ran one by one
  // (mean batch 1.00), and batching lost 7% of the rate.
  if (batch.front().task.batch && batching_.max_batch_size > 1 &&
      batching_.delay <= absl::ZeroDuration()) {
    GatherBatch(lane, batch, size_t(batching_.max_batch_size));
    CountTake(lane, batch.size());
  }
  return true;
}

bool Scheduler::PollerFree(const Lane& lane) const {
  return (lane.spinning && !lane.spinner_has_work.load(std::memory_order_relaxed)) ||
         lane.spin_wanted;
}

void Scheduler::WantPollerIfIdle(Lane& lane) {
  if (worker_spin_ > absl::ZeroDuration() && lane.running == 0 && !lane.spinning &&
      absl::Now() - lane.last_crowded > worker_spin_) {
    lane.spin_wanted = true;
  }
}

void Scheduler::SpinForWork(Lane& lane) {
  lane.spinning = true;
  lane.spinner_has_work.store(false, std::memory_order_relaxed);
  lane.mu.Unlock();
  const auto until = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(worker_spin_);
  while (!lane.spinner_has_work.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < until) {
    common::CpuRelax();
  }
  lane.mu.Lock();
  lane.spinning = false;
  lane.spinner_has_work.store(false, std::memory_order_relaxed);
}

void Scheduler::WorkerLoop(Lane& lane) {
  for (;;) {
    std::vector<Entry> batch;
    {
      absl::MutexLock lock(&lane.mu);
      // Tasks run on the submitting thread count against the device's
      // concurrency too; a draining scheduler runs what is left regardless.
      while (!lane.stopping && (lane.queue.empty() || lane.busy >= lane.device->concurrency())) {
        // Only once the device has gone idle after a task: an idle server
        // does not poll.
        if (lane.spin_wanted && !lane.spinning && lane.queue.empty()) {
          lane.spin_wanted = false;
          SpinForWork(lane);
          continue;
        }
        ++lane.parked;
        lane.ready.Wait(&lane.mu);
        --lane.parked;
      }
      if (lane.queue.empty()) return;  // stopping and drained
      lane.spin_wanted = false;        // this worker takes the task a poller was wanted for
      // This worker's share of what waits: the queue split over all the
      // device's workers (the busy ones come back soon), so tasks batch only
      // when more wait than there are workers. A worker that took every
      // waiting task while the others came back to an empty queue made
      // batching lose at 8 requests in flight on 4 streams (28.8k/s against
      // 35.4k/s unbatched on an H200). A delay asks for company: then a
      // batch takes all it may.
      const size_t workers = size_t(std::max(1, lane.device->concurrency()));
      const size_t share = batching_.delay > absl::ZeroDuration()
                               ? size_t(batching_.max_batch_size)
                               : std::min(size_t(batching_.max_batch_size),
                                          (lane.queue.size() + workers - 1) / workers);
      batch.push_back(std::move(lane.queue.front()));
      lane.queue.pop_front();
      lane.waiting.store(int64_t(lane.queue.size()), std::memory_order_relaxed);
      ++lane.running;
      ++lane.busy;
      if (batch.front().task.batch && batching_.max_batch_size > 1) {
        GatherBatch(lane, batch, share);
      }
    }
    RunBatch(lane, batch, Runner::kWorker);
    absl::MutexLock lock(&lane.mu);
    lane.running -= int(batch.size());
    --lane.busy;
    WantPollerIfIdle(lane);
  }
}

void Scheduler::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  accepting_.store(false);
  for (auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    lane->stopping = true;
    lane->ready.SignalAll();
    lane->spinner_has_work.store(true, std::memory_order_release);  // stop polling
    if (lane->open != nullptr) lane->open->joined.SignalAll();
  }
  for (auto& lane : lanes_) {
    for (std::thread& t : lane->workers) {
      if (t.joinable()) t.join();
    }
    // And the tasks running on the threads that submitted them.
    absl::MutexLock lock(&lane->mu);
    lane->mu.Await(absl::Condition(
        +[](Lane* l) ABSL_NO_THREAD_SAFETY_ANALYSIS { return l->running == 0; }, lane.get()));
  }
  // Every answer handed to the answer threads is delivered before they go.
  {
    absl::MutexLock lock(&answers_mu_);
    answers_stopping_ = true;
    answers_ready_.SignalAll();
  }
  for (std::thread& t : answer_threads_) {
    if (t.joinable()) t.join();
  }
}

template <typename Count>
int64_t Scheduler::SumOverLanes(Count count) const {
  int64_t total = 0;
  for (const auto& lane : lanes_) {
    absl::MutexLock lock(&lane->mu);
    total += int64_t(count(*lane));
  }
  return total;
}

int64_t Scheduler::queued() const {
  return SumOverLanes([](const Lane& lane) { return lane.queue.size(); });
}

int64_t Scheduler::parked_workers() const {
  return SumOverLanes([](const Lane& lane) { return lane.parked; });
}

int64_t Scheduler::running() const {
  return SumOverLanes([](const Lane& lane) { return lane.running.load(); });
}

bool Scheduler::Idle(const Device* device) const {
  for (const auto& lane : lanes_) {
    if (Candidate(*lane, device) && lane->running.load(std::memory_order_relaxed) == 0 &&
        lane->waiting.load(std::memory_order_relaxed) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace gpucompute::server
