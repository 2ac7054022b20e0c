// Admission and dispatch: a bounded queue per device, worker threads that
// run tasks on it, least-loaded placement, deadline/cancellation checks
// before work starts, and dynamic batching: batchable tasks queued together
// run as one batch.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// How a task runs as part of a batch. Tasks with equal keys (same op, dtype,
// shape, variant and placement) can share one Device::ExecuteBatch.
struct BatchPart {
  std::string key;
  // On the worker, before the batch runs: this task's job (its output memory
  // chosen), or why it cannot run (its own failure, not the batch's).
  std::function<absl::StatusOr<ComputeJob>(Device&)> prepare;
  // This task's own result and the number of jobs that ran together; returns
  // the task's status.
  std::function<absl::Status(absl::StatusOr<StageTimes> result, int batch_size)> finish;
};

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
  // Set when the task may run in a batch; `run` is used when it runs alone.
  std::optional<BatchPart> batch;
  // Small enough to run on the submitting thread when its device has a
  // worker's turn free, nothing waits and no worker polls for work: no
  // hand-off to a worker and back (see Scheduler::Submit).
  bool may_run_inline = false;
};

struct BatchingOptions {
  // Tasks run together at most; 1 turns batching off.
  int max_batch_size = 1;
  // How long the first task of a batch waits for company when fewer than
  // max_batch_size are queued; zero batches only what is already waiting.
  absl::Duration delay = absl::ZeroDuration();
};

class Scheduler {
 public:
  // `worker_spin`: how long a worker keeps polling for the next task before
  // it sleeps, once its device has nothing in flight and has run one task
  // at a time for as long (one worker per device at a time); a task then
  // starts without a sleeping thread's wake-up.
  // `answer_threads`: threads that answer finished tasks for workers that
  // have more work waiting (0: workers answer their own).
  // `inline_threads`: submitting threads that may run small tasks on one
  // device at once while another small task that may join a batch arrives
  // (0: half the device's concurrency, at least 1). Past it such a task queues
  // and its thread returns; the threads running small tasks take what
  // queued, as batches, when theirs ends (see Submit). Small tasks that
  // never batch run on their submitter while the device has a turn free.
  Scheduler(std::vector<std::unique_ptr<Device>> devices, int max_queue_depth,
            BatchingOptions batching = {}, absl::Duration worker_spin = absl::ZeroDuration(),
            int answer_threads = 0, int inline_threads = 0);
  ~Scheduler();

  // Holding small tasks that may batch back past the inline limit pays
  // only where the threads that take what queued find batch mates. In one
  // run on an H100 (4 rounds, 8 connections), at 64 requests in flight they
  // took 5.2 a time (10% more MatMuls than batching off); at 8 in flight,
  // 1.02, and the requests held back lost 4% of the rate waiting for
  // another's end. So a device judges its takes kTakesPerVerdict at a
  // time, and when they found fewer than 1.5 tasks each it stops holding
  // back for a pause; then it holds back again and counts anew. The pause
  // starts at kHoldBackPause and doubles with each such verdict in a row, up
  // to kMaxHoldBackPause (a steady load of few requests in flight then holds
  // back for a verdict's 16 takes every 320 ms, not every 20); a verdict
  // that keeps holding back sets it back to kHoldBackPause.
  static constexpr int kTakesPerVerdict = 16;
  static constexpr absl::Duration kHoldBackPause = absl::Milliseconds(20);
  static constexpr absl::Duration kMaxHoldBackPause = absl::Milliseconds(320);

  // Queues the task on its device, or else on the least-loaded one.
  void Submit(Task task);
  // Refuses new tasks (UNAVAILABLE), lets queued and running ones finish, and
  // joins the workers. Idempotent.
  void Shutdown();

  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  const BatchingOptions& batching() const { return batching_; }
  int64_t queued() const;
  int64_t running() const;
  // Whether a task for `device` (any, if null) would find a healthy device
  // with nothing queued or running: it would run alone. Read without a
  // lock, so a hint: a task that finishes at this moment may still count.
  bool Idle(const Device* device) const;
  // Workers asleep, waiting to be woken for work (not polling, not running).
  int64_t parked_workers() const;

 private:
  struct Entry {
    Task task;
    absl::Time enqueued;
  };
  // Who runs a task: one of the device's workers, or the thread that
  // submitted a small task (a gRPC thread), which answers its own.
  enum class Runner { kWorker, kSubmitter };
  // A finished task whose answer waits for an answer thread.
  struct Answered {
    Task task;
    absl::Status status;
    Device* device = nullptr;
    int64_t queue_us = 0;
  };
  // A batch a worker holds open for company (BatchingOptions::delay): new
  // tasks with its key join it instead of queueing.
  struct OpenBatch {
    const std::string* key = nullptr;
    std::vector<Entry>* entries = nullptr;
    absl::CondVar joined;
  };
  struct Lane {
    Device* device = nullptr;
    mutable absl::Mutex mu;
    absl::CondVar ready;
    std::deque<Entry> queue ABSL_GUARDED_BY(mu);
    // Tasks taken from the queue (or never queued). Changed under mu; read
    // without it by Idle, as `waiting` is.
    std::atomic<int> running{0};
    // Threads running this device's work: workers with a task or a batch,
    // and submitters running a small task. At most the device's concurrency.
    int busy ABSL_GUARDED_BY(mu) = 0;
    int parked ABSL_GUARDED_BY(mu) = 0;  // workers in ready.Wait
    // Of those, the submitters: while one runs, a small task that queues
    // wakes no worker, as that submitter takes it when its own task ends.
    int inline_busy ABSL_GUARDED_BY(mu) = 0;
    bool stopping ABSL_GUARDED_BY(mu) = false;
    OpenBatch* open ABSL_GUARDED_BY(mu) = nullptr;
    // A worker polling for work instead of sleeping (worker_spin), and
    // whether a task queued since is already its own (set under mu).
    bool spinning ABSL_GUARDED_BY(mu) = false;
    // The device has just gone idle: the next worker to look polls.
    bool spin_wanted ABSL_GUARDED_BY(mu) = false;
    // When a task last arrived while another was in flight.
    absl::Time last_crowded ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    // Whether small tasks that may batch are held back past the inline
    // limit (kTakesPerVerdict): takes of such tasks from the queue since the
    // last verdict and the tasks they moved, when a pause ends, and how long
    // the next one lasts.
    bool holding_back ABSL_GUARDED_BY(mu) = true;
    int takes ABSL_GUARDED_BY(mu) = 0;
    int taken ABSL_GUARDED_BY(mu) = 0;
    absl::Time hold_back_again ABSL_GUARDED_BY(mu) = absl::InfinitePast();
    absl::Duration next_pause ABSL_GUARDED_BY(mu) = kHoldBackPause;
    std::atomic<bool> spinner_has_work{false};
    // queue.size(), read without the lock by a worker deciding who answers.
    std::atomic<int64_t> waiting{0};
    std::vector<std::thread> workers;
  };

  void WorkerLoop(Lane& lane);
  // Whether `lane` is healthy and one a task for `device` (any, if null)
  // may run on.
  static bool Candidate(const Lane& lane, const Device* device);
  // The healthy lane with the fewest queued and running tasks among those
  // the task may run on (its tensor's device, or any); null if none.
  Lane* LeastLoadedLane(const Task& task) const;
  // On the submitting thread, which took a turn of `lane`: runs `task`
  // (none when it queued behind others: it is taken in its turn), then
  // what queued behind the inline limit, in up to kMaxInlineRounds batches,
  // and gives the turn back.
  void RunSmallTasksHere(Lane& lane, std::optional<Task> task);
  // Whether a small task should go to a polling worker (one polls, or is
  // about to) rather than run on the thread that submitted it.
  bool PollerFree(const Lane& lane) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // After a task ends with nothing else in flight on the device, and none
  // has overlapped another for a polling time, a worker polls for the next
  // one: a lone caller's next request then starts on a warm thread. Under
  // load nobody polls, so that small tasks run on the threads that received
  // them and pollers take no cores from them. (A device at 64 calls in
  // flight still empties for moments between them: going by "nothing in
  // flight" alone, pollers took most tasks there, and answered them from
  // their own threads.)
  void WantPollerIfIdle(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // Releases lane.mu until a task is queued for this worker or worker_spin
  // has passed, polling without sleeping.
  void SpinForWork(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // Moves queued tasks with the first one's key into `batch`, up to `share`
  // in all, then, with a delay, holds the batch open until it is full or the
  // delay has passed.
  void GatherBatch(Lane& lane, std::vector<Entry>& batch, size_t share)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  void RunBatch(Lane& lane, std::vector<Entry>& batch, Runner runner);
  // Submitting threads that may run small tasks on `lane` at once.
  int InlineLimit(const Lane& lane) const;
  // Whether a small task that may batch, past the inline limit, queues now
  // (ends a pause that is over); see kTakesPerVerdict.
  static bool HoldsBack(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // Counts a take of `tasks` batchable tasks by a thread running small
  // tasks, and gives the verdict every kTakesPerVerdict takes.
  static void CountTake(Lane& lane, size_t tasks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // `count(lane)` added up over the lanes, each read under its lock.
  template <typename Count>
  int64_t SumOverLanes(Count count) const;
  // Moves the queue's first task into `batch` if it may run on a submitting
  // thread, with its batch mates when batching is on; false, and nothing
  // taken, otherwise.
  bool TakeSmallTasks(Lane& lane, std::vector<Entry>& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  void RunEntry(Lane& lane, Entry& entry, Runner runner);
  // Answers a task run on `lane`: on this thread unless a worker ran it and
  // at least as many tasks wait as the device has workers, else through an
  // answer thread, so that the worker goes on with the next task while
  // gRPC sends this one's answer (about a third of a small request's time
  // on a worker: on an H200 host, 4 workers answering their own tasks
  // capped a 1x1 Transpose at about 60k/s). A submitting thread answers
  // its own: it is one of gRPC's, awake and holding the call, where a
  // hand-off costs another thread's wake-up and gains little (on an H100,
  // c=64 over 8 connections, no answer threads at all served the inline
  // MatMuls 3% faster and the kept ones 7%, in each of 3 rounds).
  void Respond(Lane& lane, Task& task, const absl::Status& status, int64_t queue_us, Runner runner);
  void AnswerLoop();

  const std::vector<std::unique_ptr<Device>> devices_;
  const int max_queue_depth_;
  const BatchingOptions batching_;
  const absl::Duration worker_spin_;
  const int inline_threads_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  absl::Mutex answers_mu_;
  absl::CondVar answers_ready_;
  std::deque<Answered> answers_ ABSL_GUARDED_BY(answers_mu_);
  bool answers_stopping_ ABSL_GUARDED_BY(answers_mu_) = false;
  std::vector<std::thread> answer_threads_;
  std::atomic<bool> accepting_{true};
  absl::Mutex shutdown_mu_;
};

}  // namespace gpucompute::server
