// The scheduler's dispatch: tasks run on the device's workers, wait in the
// queue while every worker is busy, a full queue refuses with
// RESOURCE_EXHAUSTED, and batchable tasks queued together run as one batch.
#include "server/engine/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace gpucompute::server {
namespace {

class FakeDevice final : public Device {
 public:
  explicit FakeDevice(int concurrency) : concurrency_(concurrency) { description_.name = "fake"; }
  const DeviceDescription& description() const override { return description_; }
  const Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return concurrency_; }
  absl::StatusOr<StageTimes> Execute(const ComputeJob&, const StopRequested&) override {
    return StageTimes{};
  }
  // Records each batch's size; a job whose problem has m == kFailingRows fails.
  std::vector<absl::StatusOr<StageTimes>> ExecuteBatch(
      absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops) override {
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(int(jobs.size()));
    }
    std::vector<absl::StatusOr<StageTimes>> results;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].problem.m == kFailingRows) {
        results.push_back(absl::InternalError("this job fails"));
      } else {
        results.push_back(StageTimes{});
      }
    }
    EXPECT_EQ(stops.size(), jobs.size());
    return results;
  }
  std::vector<int> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  static constexpr int64_t kFailingRows = 13;
  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob&,
                                                          const StopRequested&) override {
    return std::vector<VariantMeasurement>{};
  }

 private:
  const int concurrency_;
  DeviceDescription description_;
  Ceilings ceilings_;
  mutable absl::Mutex mu_;
  std::vector<int> batches_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<Scheduler> MakeScheduler(int concurrency, int max_queue_depth,
                                         BatchingOptions batching = {},
                                         absl::Duration worker_spin = absl::ZeroDuration()) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>(concurrency));
  return std::make_unique<Scheduler>(std::move(devices), max_queue_depth, batching, worker_spin);
}

FakeDevice& DeviceOf(const Scheduler& scheduler) {
  return static_cast<FakeDevice&>(*scheduler.devices().front());
}

// Submits a task that records the thread it ran on and its final status.
struct Probe {
  std::thread::id ran_on, answered_on;
  absl::Status status = absl::UnknownError("not done");
  absl::Notification done;
};

Task ProbeTask(Probe& probe, absl::Notification* hold = nullptr) {
  Task task;
  task.run = [&probe, hold](Device&) {
    probe.ran_on = std::this_thread::get_id();
    if (hold != nullptr) hold->WaitForNotification();
    return absl::OkStatus();
  };
  task.done = [&probe](absl::Status status, Device*, int64_t) {
    probe.status = status;
    probe.answered_on = std::this_thread::get_id();
    probe.done.Notify();
  };
  return task;
}

// Holds the only worker until `release`, so that what is submitted next queues.
struct BusyWorker {
  Probe probe;
  absl::Notification release;
  explicit BusyWorker(Scheduler& scheduler) {
    scheduler.Submit(ProbeTask(probe, &release));
    while (scheduler.running() == 0) std::this_thread::yield();
  }
  ~BusyWorker() {
    release.Notify();
    probe.done.WaitForNotification();
  }
};

TEST(SchedulerTest, QueuedTaskRunsOnAWorker) {
  auto scheduler = MakeScheduler(1, 4);
  Probe probe;
  scheduler->Submit(ProbeTask(probe));
  probe.done.WaitForNotification();
  EXPECT_TRUE(probe.status.ok()) << probe.status;
  EXPECT_NE(probe.ran_on, std::this_thread::get_id());
}

TEST(SchedulerTest, TaskWaitsInTheQueueWhileEveryWorkerIsBusy) {
  auto scheduler = MakeScheduler(1, 4);
  absl::Notification release;
  Probe busy, waiting;
  scheduler->Submit(ProbeTask(busy, &release));
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(ProbeTask(waiting));
  EXPECT_FALSE(waiting.done.HasBeenNotified());
  EXPECT_EQ(scheduler->queued(), 1);
  release.Notify();
  waiting.done.WaitForNotification();
  busy.done.WaitForNotification();
  EXPECT_TRUE(waiting.status.ok()) << waiting.status;
  EXPECT_EQ(scheduler->queued(), 0);
}

TEST(SchedulerTest, FullQueueRefusesWithResourceExhausted) {
  auto scheduler = MakeScheduler(1, 1);
  absl::Notification release;
  Probe busy, queued, refused;
  scheduler->Submit(ProbeTask(busy, &release));
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(ProbeTask(queued));
  scheduler->Submit(ProbeTask(refused));
  ASSERT_TRUE(refused.done.HasBeenNotified());
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
  EXPECT_NE(std::string(refused.status.message()).find("max_queue_depth 1"), std::string::npos);
  release.Notify();
  queued.done.WaitForNotification();
  EXPECT_TRUE(queued.status.ok());
}

TEST(SchedulerTest, SmallTaskRunsOnTheSubmittingThreadWhenAWorkerIsFree) {
  auto scheduler = MakeScheduler(1, 4);
  Probe probe;
  Task task = ProbeTask(probe);
  task.may_run_inline = true;
  scheduler->Submit(std::move(task));
  ASSERT_TRUE(probe.done.HasBeenNotified());
  EXPECT_EQ(probe.ran_on, std::this_thread::get_id());
}

TEST(SchedulerTest, SmallTaskQueuesWhileEveryWorkerIsBusy) {
  auto scheduler = MakeScheduler(1, 4);
  Probe probe;
  {
    BusyWorker busy(*scheduler);
    Task task = ProbeTask(probe);
    task.may_run_inline = true;
    scheduler->Submit(std::move(task));
    EXPECT_FALSE(probe.done.HasBeenNotified());
    EXPECT_EQ(scheduler->queued(), 1);
  }
  probe.done.WaitForNotification();
  EXPECT_NE(probe.ran_on, std::this_thread::get_id());
}

// A task running on its submitter's thread takes a worker's turn: with
// concurrency 1, the next task waits for it.
TEST(SchedulerTest, TasksRunOnSubmittersCountAgainstConcurrency) {
  auto scheduler = MakeScheduler(1, 4);
  absl::Notification release;
  Probe first, second;
  std::thread submitter([&] {
    Task task = ProbeTask(first, &release);
    task.may_run_inline = true;
    scheduler->Submit(std::move(task));
  });
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(ProbeTask(second));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(second.done.HasBeenNotified());
  release.Notify();
  submitter.join();
  second.done.WaitForNotification();
  EXPECT_TRUE(first.status.ok() && second.status.ok());
}

// Idle: nothing running or queued on the device asked about (any, if none).
TEST(SchedulerTest, IdleOnlyWhileTheDeviceHasNothingRunningOrQueued) {
  auto scheduler = MakeScheduler(1, 4);
  const Device* device = &DeviceOf(*scheduler);
  const FakeDevice elsewhere(1);  // not one of the scheduler's
  EXPECT_TRUE(scheduler->Idle(nullptr));
  EXPECT_TRUE(scheduler->Idle(device));
  EXPECT_FALSE(scheduler->Idle(&elsewhere));
  Probe queued;
  {
    BusyWorker busy(*scheduler);
    EXPECT_FALSE(scheduler->Idle(nullptr));
    EXPECT_FALSE(scheduler->Idle(device));
    scheduler->Submit(ProbeTask(queued));
    EXPECT_EQ(scheduler->queued(), 1);
    EXPECT_FALSE(scheduler->Idle(device));
  }
  queued.done.WaitForNotification();
  // A task is answered before its worker counts it finished.
  while (scheduler->running() > 0) std::this_thread::yield();
  EXPECT_TRUE(scheduler->Idle(device));
}

// Polling workers (worker_spin). The spin is far longer than any test, so a
// worker that finished a task is certainly still polling.
constexpr absl::Duration kLongSpin = absl::Seconds(30);
constexpr absl::Duration kPrompt = absl::Seconds(5);

// A task is answered before its worker counts it finished; once the count
// is zero, a worker polls (or is about to).
void WaitUntilIdle(const Scheduler& scheduler) {
  while (scheduler.running() > 0) std::this_thread::yield();
}

void RunOneQueuedTask(Scheduler& scheduler) {
  Probe probe;
  scheduler.Submit(ProbeTask(probe));
  probe.done.WaitForNotification();
  ASSERT_TRUE(probe.status.ok()) << probe.status;
  WaitUntilIdle(scheduler);
}

Task SmallTask(Probe& probe, absl::Notification* hold = nullptr) {
  Task task = ProbeTask(probe, hold);
  task.may_run_inline = true;
  return task;
}

TEST(SchedulerSpin, APollingWorkerTakesTheNextTaskAtOnce) {
  auto scheduler = MakeScheduler(1, 4, {}, kLongSpin);
  RunOneQueuedTask(*scheduler);
  Probe next;
  scheduler->Submit(ProbeTask(next));
  EXPECT_TRUE(next.done.WaitForNotificationWithTimeout(kPrompt))
      << "the polling worker did not see the task queued for it";
}

// The polling worker takes the first task queued while it polls; a second one
// must still wake a sleeping worker. Both tasks wait until both have
// started, so they finish only if they run side by side.
TEST(SchedulerSpin, MoreTasksThanPollersWakeTheSleepingWorkers) {
  auto scheduler = MakeScheduler(2, 4, {}, kLongSpin);
  RunOneQueuedTask(*scheduler);
  std::atomic<int> started{0};
  auto meet = [&started](Device&) {
    started.fetch_add(1);
    const absl::Time give_up = absl::Now() + kPrompt;
    while (started.load() < 2 && absl::Now() < give_up) std::this_thread::yield();
    return started.load() == 2 ? absl::OkStatus()
                               : absl::DeadlineExceededError("the other task never started");
  };
  Probe first, second;
  Task a = ProbeTask(first), b = ProbeTask(second);
  a.run = meet;
  b.run = meet;
  scheduler->Submit(std::move(a));
  scheduler->Submit(std::move(b));
  first.done.WaitForNotification();
  second.done.WaitForNotification();
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE(second.status.ok()) << second.status;
}

// A lone caller's small tasks go to the polling worker, one after another:
// never to the submitting thread while a worker polls.
TEST(SchedulerSpin, SmallTasksGoToAPollingWorker) {
  auto scheduler = MakeScheduler(1, 4, {}, kLongSpin);
  RunOneQueuedTask(*scheduler);
  for (int i = 0; i < 3; ++i) {
    Probe probe;
    scheduler->Submit(SmallTask(probe));
    ASSERT_TRUE(probe.done.WaitForNotificationWithTimeout(kPrompt));
    EXPECT_NE(probe.ran_on, std::this_thread::get_id()) << "task " << i << " ran inline";
    WaitUntilIdle(*scheduler);
  }
}

// An idle server has no poller: its first small task runs on the submitting
// thread, and once that ends a worker polls for the next.
TEST(SchedulerSpin, AnIdleDevicePollsAfterASmallTaskRanInline) {
  auto scheduler = MakeScheduler(1, 4, {}, kLongSpin);
  Probe first;
  scheduler->Submit(SmallTask(first));
  ASSERT_TRUE(first.done.HasBeenNotified());
  EXPECT_EQ(first.ran_on, std::this_thread::get_id());
  Probe second;
  scheduler->Submit(SmallTask(second));
  ASSERT_TRUE(second.done.WaitForNotificationWithTimeout(kPrompt));
  EXPECT_NE(second.ran_on, std::this_thread::get_id()) << "no worker polled after the first";
}

// Under load (another task in flight, so no worker polls) a small task runs
// on the thread that submitted it, which then answers it. And a device that
// had two tasks in flight within the polling time gets no poller when it
// empties: the moments between calls under load are no lone caller's.
TEST(SchedulerSpin, UnderLoadSmallTasksRunInlineAndNoWorkerPollsSoonAfter) {
  auto scheduler = MakeScheduler(2, 4, {}, kLongSpin);
  {
    BusyWorker busy(*scheduler);
    Probe overlapping;
    scheduler->Submit(SmallTask(overlapping));
    ASSERT_TRUE(overlapping.done.HasBeenNotified());
    EXPECT_EQ(overlapping.ran_on, std::this_thread::get_id());
  }
  WaitUntilIdle(*scheduler);
  Probe next;
  scheduler->Submit(SmallTask(next));
  ASSERT_TRUE(next.done.HasBeenNotified()) << "a worker polled for it";
  EXPECT_EQ(next.ran_on, std::this_thread::get_id());
}

TEST(SchedulerSpin, ShutdownDoesNotWaitForAPollingWorker) {
  auto scheduler = MakeScheduler(1, 4, {}, kLongSpin);
  RunOneQueuedTask(*scheduler);
  const absl::Time start = absl::Now();
  scheduler->Shutdown();
  EXPECT_LT(absl::Now() - start, kPrompt);
}

// A batchable task: its status, and the batch size its part was finished with.
struct BatchProbe {
  absl::Status status = absl::UnknownError("not done");
  int batch_size = 0;
  bool ran_alone = false;
  std::thread::id ran_on;  // when it ran alone
  absl::Notification done;
};

Task BatchTask(BatchProbe& probe, const std::string& key, int64_t rows = 1) {
  Task task;
  task.run = [&probe](Device&) {
    probe.ran_alone = true;
    probe.ran_on = std::this_thread::get_id();
    return absl::OkStatus();
  };
  task.done = [&probe](absl::Status status, Device*, int64_t) {
    probe.status = status;
    probe.done.Notify();
  };
  BatchPart part;
  part.key = key;
  part.prepare = [rows](Device&) -> absl::StatusOr<ComputeJob> {
    if (rows < 0) return absl::ResourceExhaustedError("no buffer for this job");
    ComputeJob job;
    job.problem.m = rows;
    return job;
  };
  part.finish = [&probe](absl::StatusOr<StageTimes> result, int batch_size) {
    probe.batch_size = batch_size;
    return result.status();
  };
  task.batch = std::move(part);
  return task;
}

// With answer threads, a worker with at least as many tasks waiting as the
// device has workers hands its answers over and goes on; the last task,
// with nothing behind it, is answered by the worker itself. Shutdown
// delivers every answer first.
TEST(SchedulerTest, AnswerThreadsAnswerForAWorkerWithMoreWaiting) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>(1));
  auto scheduler = std::make_unique<Scheduler>(std::move(devices), 64, BatchingOptions{},
                                               absl::ZeroDuration(), /*answer_threads=*/2);
  constexpr int kTasks = 6;
  struct Seen {
    std::thread::id ran_on, answered_on;
    absl::Status status = absl::UnknownError("not done");
  };
  std::vector<Seen> seen(kTasks);
  std::atomic<int> answered{0};
  auto make = [&](int i, absl::Notification* hold) {
    Task task;
    task.run = [&seen, i, hold](Device&) {
      seen[size_t(i)].ran_on = std::this_thread::get_id();
      if (hold != nullptr) hold->WaitForNotification();
      return absl::OkStatus();
    };
    task.done = [&seen, &answered, i](absl::Status status, Device*, int64_t) {
      seen[size_t(i)].answered_on = std::this_thread::get_id();
      seen[size_t(i)].status = status;
      answered.fetch_add(1);
    };
    return task;
  };
  absl::Notification release;
  scheduler->Submit(make(0, &release));
  while (scheduler->running() == 0) std::this_thread::yield();
  for (int i = 1; i < kTasks; ++i) scheduler->Submit(make(i, nullptr));
  release.Notify();
  scheduler->Shutdown();
  EXPECT_EQ(answered.load(), kTasks);
  for (const Seen& s : seen) EXPECT_TRUE(s.status.ok()) << s.status;
  // The first ran with five waiting (one worker): answered elsewhere. The
  // last had none.
  EXPECT_NE(seen.front().answered_on, seen.front().ran_on);
  EXPECT_EQ(seen.back().answered_on, seen.back().ran_on);
}

// Every probe already answered, OK, all in one batch of them all.
void ExpectAnsweredAsOneBatch(const std::vector<BatchProbe>& probes) {
  for (const auto& p : probes) {
    ASSERT_TRUE(p.done.HasBeenNotified());
    EXPECT_TRUE(p.status.ok()) << p.status;
    EXPECT_EQ(p.batch_size, int(probes.size()));
  }
}

// A small task that may batch, of key "k".
Task SmallBatchTask(BatchProbe& probe) {
  Task task = BatchTask(probe, "k");
  task.may_run_inline = true;
  return task;
}

// Returned once every worker sleeps: a worker still starting would take
// what queues past the limit (it may: it is awake), where these tests want
// the thread running a small task to take it.
std::unique_ptr<Scheduler> MakeInlineScheduler(int concurrency, int inline_threads,
                                               BatchingOptions batching = {},
                                               int answer_threads = 0) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>(concurrency));
  auto scheduler = std::make_unique<Scheduler>(
      std::move(devices), 64, batching, absl::ZeroDuration(), answer_threads, inline_threads);
  while (scheduler->parked_workers() < concurrency) std::this_thread::yield();
  return scheduler;
}

// Past the inline limit a small task that may batch queues, although
// workers are free, and the thread running a small task takes it when its
// own ends.
TEST(SchedulerInline, PastTheLimitTheThreadRunningASmallTaskTakesTheNext) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  absl::Notification release;
  Probe first;
  BatchProbe second;
  std::thread::id runner;
  std::thread submitter([&] {
    runner = std::this_thread::get_id();
    scheduler->Submit(SmallTask(first, &release));
  });
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(SmallBatchTask(second));
  EXPECT_FALSE(second.done.HasBeenNotified());
  EXPECT_EQ(scheduler->queued(), 1);
  release.Notify();
  submitter.join();
  ASSERT_TRUE(second.done.HasBeenNotified());  // before the runner returned
  EXPECT_TRUE(first.status.ok() && second.status.ok());
  EXPECT_TRUE(second.ran_alone);
  EXPECT_EQ(second.ran_on, runner);
  EXPECT_EQ(scheduler->queued(), 0);
  EXPECT_EQ(scheduler->running(), 0);
}

// A thread running small tasks answers them itself, though answer threads
// stand by and more tasks wait than the device has workers (a worker would
// hand its answer over): it is one of gRPC's threads, where an answer costs
// no hand-off.
TEST(SchedulerInline, TheThreadRunningSmallTasksAnswersThemWithTasksWaiting) {
  auto scheduler = MakeInlineScheduler(2, /*inline_threads=*/1, {8, absl::ZeroDuration()},
                                       /*answer_threads=*/2);
  absl::Notification release;
  Probe first;
  std::thread::id runner;
  std::thread submitter([&] {
    runner = std::this_thread::get_id();
    scheduler->Submit(SmallTask(first, &release));
  });
  while (scheduler->running() == 0) std::this_thread::yield();
  std::vector<BatchProbe> probes(4);
  for (auto& p : probes) scheduler->Submit(SmallBatchTask(p));
  EXPECT_EQ(scheduler->queued(), 4);  // twice the device's workers
  release.Notify();
  submitter.join();
  ASSERT_TRUE(first.done.HasBeenNotified());
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.answered_on, runner);
  ExpectAnsweredAsOneBatch(probes);
}

// The first inline thread free takes every batch mate that waits, not a
// share of them: the other inline threads are busy.
TEST(SchedulerInline, TheFirstThreadFreeTakesEveryBatchMate) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/2, {8, absl::ZeroDuration()});
  absl::Notification release_first, release_second;
  Probe first, second;
  std::thread one([&] { scheduler->Submit(SmallTask(first, &release_first)); });
  std::thread two([&] { scheduler->Submit(SmallTask(second, &release_second)); });
  while (scheduler->running() < 2) std::this_thread::yield();
  std::vector<BatchProbe> probes(4);
  for (auto& p : probes) {
    scheduler->Submit(SmallBatchTask(p));
  }
  EXPECT_EQ(scheduler->queued(), 4);
  release_first.Notify();
  one.join();
  ExpectAnsweredAsOneBatch(probes);
  EXPECT_FALSE(second.done.HasBeenNotified());
  release_second.Notify();
  two.join();
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{4}));
}

// By default (0) half the device's concurrency may run small tasks on
// their submitters while a task that may batch arrives: with 4, the third
// such task queues.
TEST(SchedulerInline, TheDefaultLimitIsHalfTheConcurrency) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/0, {8, absl::ZeroDuration()});
  absl::Notification release;
  Probe first, second;
  std::thread one([&] { scheduler->Submit(SmallTask(first, &release)); });
  std::thread two([&] { scheduler->Submit(SmallTask(second, &release)); });
  while (scheduler->running() < 2) std::this_thread::yield();
  BatchProbe third;
  scheduler->Submit(SmallBatchTask(third));
  EXPECT_FALSE(third.done.HasBeenNotified());
  EXPECT_EQ(scheduler->queued(), 1);
  release.Notify();
  one.join();
  two.join();
  ASSERT_TRUE(third.done.HasBeenNotified());
  EXPECT_TRUE(first.status.ok() && second.status.ok() && third.status.ok());
}

// A small task that never batches gains nothing by queueing: past the
// inline limit it still runs on its own thread while the device has a
// turn free.
TEST(SchedulerInline, ASmallTaskThatNeverBatchesIgnoresTheLimit) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  absl::Notification release;
  Probe first, second;
  std::thread submitter([&] { scheduler->Submit(SmallTask(first, &release)); });
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(SmallTask(second));
  ASSERT_TRUE(second.done.HasBeenNotified());  // ran before Submit returned
  EXPECT_EQ(second.ran_on, std::this_thread::get_id());
  release.Notify();
  submitter.join();
  EXPECT_TRUE(first.status.ok() && second.status.ok());
}

// With batching on, what queued behind the limit runs as one batch on that
// thread.
TEST(SchedulerInline, WhatQueuedBehindTheLimitRunsAsOneBatch) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  absl::Notification release;
  Probe first;
  std::thread submitter([&] { scheduler->Submit(SmallTask(first, &release)); });
  while (scheduler->running() == 0) std::this_thread::yield();
  std::vector<BatchProbe> probes(5);
  for (auto& p : probes) {
    scheduler->Submit(SmallBatchTask(p));
  }
  EXPECT_EQ(scheduler->queued(), 5);
  release.Notify();
  submitter.join();
  ExpectAnsweredAsOneBatch(probes);
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{5}));
}

// One take of what queued behind the limit: `mates` tasks that may batch
// queue while a small task runs, and its thread takes them when it ends.
// Takes one of the scheduler's turns with inline_threads 1.
void QueueBehindOneSmallTask(Scheduler& scheduler, int mates) {
  absl::Notification release;
  Probe first;
  std::thread submitter([&] { scheduler.Submit(SmallTask(first, &release)); });
  while (scheduler.running() == 0) std::this_thread::yield();
  std::vector<BatchProbe> probes(static_cast<size_t>(mates));
  for (auto& p : probes) scheduler.Submit(SmallBatchTask(p));
  EXPECT_EQ(scheduler.queued(), mates);
  release.Notify();
  submitter.join();
  if (mates > 1) {
    ExpectAnsweredAsOneBatch(probes);
  } else {
    ASSERT_TRUE(probes.front().done.HasBeenNotified());
    EXPECT_TRUE(probes.front().ran_alone);
  }
  while (scheduler.running() > 0) std::this_thread::yield();
}

// Whether a small task that may batch, sent while another small task runs
// on the only inline turn, was held back (queued) rather than run at once
// on the sending thread.
bool HeldBack(Scheduler& scheduler) {
  absl::Notification release;
  Probe first;
  std::thread submitter([&] { scheduler.Submit(SmallTask(first, &release)); });
  while (scheduler.running() == 0) std::this_thread::yield();
  BatchProbe next;
  scheduler.Submit(SmallBatchTask(next));
  const bool held = !next.done.HasBeenNotified();
  EXPECT_TRUE(held || next.ran_on == std::this_thread::get_id());
  release.Notify();
  submitter.join();
  EXPECT_TRUE(next.done.HasBeenNotified());
  while (scheduler.running() > 0) std::this_thread::yield();
  return held;
}

// Takes that find no batch mates (one task each, as at 8 requests in
// flight over 8 connections) end the holding back: past the limit a task
// that may batch then runs on its own thread, as one that never batches.
// After the pause it is held back again.
TEST(SchedulerInline, TakesWithoutBatchMatesStopTheHoldingBackForAPause) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  for (int i = 0; i < Scheduler::kTakesPerVerdict - 1; ++i) QueueBehindOneSmallTask(*scheduler, 1);
  const absl::Time before_verdict = absl::Now();
  EXPECT_TRUE(HeldBack(*scheduler));  // the verdict's last take: one task
  const bool held = HeldBack(*scheduler);
  // A machine slow enough to pass the pause meanwhile proves nothing here.
  ASSERT_TRUE(absl::Now() - before_verdict >= Scheduler::kHoldBackPause || !held);
  absl::SleepFor(Scheduler::kHoldBackPause);
  EXPECT_TRUE(HeldBack(*scheduler));
}

// One verdict of takes that find no batch mates: the given mates for all
// but the last take, which HeldBack makes (true: that task was held back).
bool VerdictOfTakes(Scheduler& scheduler, int mates) {
  for (int i = 0; i < Scheduler::kTakesPerVerdict - 1; ++i) {
    QueueBehindOneSmallTask(scheduler, mates);
  }
  return HeldBack(scheduler);
}

// Verdicts without batch mates in a row pause the holding back for longer
// each time: the second pause is twice the first.
TEST(SchedulerInline, PausesGrowWhileTakesFindNoBatchMates) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  EXPECT_TRUE(VerdictOfTakes(*scheduler, 1));
  absl::SleepFor(Scheduler::kHoldBackPause);
  EXPECT_TRUE(VerdictOfTakes(*scheduler, 1));  // held back again, then the second verdict
  const absl::Time second_verdict = absl::Now();
  absl::SleepFor(Scheduler::kHoldBackPause);
  const bool held = HeldBack(*scheduler);
  // A machine slow enough to pass the longer pause meanwhile proves nothing here.
  ASSERT_TRUE(absl::Now() - second_verdict >= 2 * Scheduler::kHoldBackPause || !held);
  absl::SleepFor(2 * Scheduler::kHoldBackPause);
  EXPECT_TRUE(HeldBack(*scheduler));
}

// A verdict that finds batch mates sets the pause back to its start.
TEST(SchedulerInline, AVerdictWithBatchMatesSetsThePauseBack) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  for (int i = 0; i < 2; ++i) {  // the next pause would be 4x the first
    VerdictOfTakes(*scheduler, 1);
    absl::SleepFor(Scheduler::kHoldBackPause * (1 << i));
  }
  for (int i = 0; i < Scheduler::kTakesPerVerdict; ++i) QueueBehindOneSmallTask(*scheduler, 2);
  EXPECT_TRUE(VerdictOfTakes(*scheduler, 1));
  absl::SleepFor(Scheduler::kHoldBackPause);
  EXPECT_TRUE(HeldBack(*scheduler));
}

// Takes that find batch mates (two tasks each, as under load) keep it.
TEST(SchedulerInline, TakesWithBatchMatesKeepTheHoldingBack) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1, {8, absl::ZeroDuration()});
  for (int i = 0; i < 2 * Scheduler::kTakesPerVerdict; ++i) QueueBehindOneSmallTask(*scheduler, 2);
  EXPECT_TRUE(HeldBack(*scheduler));
  EXPECT_EQ(DeviceOf(*scheduler).batches().size(), size_t(2 * Scheduler::kTakesPerVerdict));
}

// A large task never runs on a thread that submitted a small one: it wakes
// a worker even while that thread runs.
TEST(SchedulerInline, ALargeTaskStillGoesToAWorker) {
  auto scheduler = MakeInlineScheduler(4, /*inline_threads=*/1);
  absl::Notification release;
  Probe first, large;
  std::thread::id runner;
  std::thread submitter([&] {
    runner = std::this_thread::get_id();
    scheduler->Submit(SmallTask(first, &release));
  });
  while (scheduler->running() == 0) std::this_thread::yield();
  scheduler->Submit(ProbeTask(large));  // wakes a worker: busy 1 of 4
  large.done.WaitForNotification();
  EXPECT_NE(large.ran_on, runner);
  release.Notify();
  submitter.join();
  EXPECT_TRUE(first.status.ok() && large.status.ok());
}

TEST(SchedulerBatching, TasksQueuedTogetherRunAsOneBatchPerKey) {
  auto scheduler = MakeScheduler(1, 64, {8, absl::ZeroDuration()});
  std::vector<BatchProbe> k(5), l(2);
  Probe lone;
  {
    BusyWorker busy(*scheduler);
    for (auto& p : k) scheduler->Submit(BatchTask(p, "k"));
    scheduler->Submit(ProbeTask(lone));
    for (auto& p : l) scheduler->Submit(BatchTask(p, "l"));
  }
  for (auto* group : {&k, &l}) {
    for (auto& p : *group) {
      p.done.WaitForNotification();
      EXPECT_TRUE(p.status.ok()) << p.status;
      EXPECT_EQ(p.batch_size, int(group->size()));
      EXPECT_FALSE(p.ran_alone);
    }
  }
  lone.done.WaitForNotification();
  EXPECT_TRUE(lone.status.ok());
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{5, 2}));
}

TEST(SchedulerBatching, MaxBatchSizeCapsEachBatch) {
  auto scheduler = MakeScheduler(1, 64, {3, absl::ZeroDuration()});
  std::vector<BatchProbe> probes(7);
  {
    BusyWorker busy(*scheduler);
    for (auto& p : probes) scheduler->Submit(BatchTask(p, "k"));
  }
  for (auto& p : probes) p.done.WaitForNotification();
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{3, 3}));
  EXPECT_TRUE(probes.back().ran_alone);  // the seventh found no company
}

// With 4 workers, 8 waiting tasks are 2 per worker: a worker takes its
// share, not the whole queue while the others come back to nothing; 40
// waiting batch up to 10.
TEST(SchedulerBatching, WorkersShareTheQueueInsteadOfOneTakingAll) {
  for (const int waiting : {8, 40}) {
    SCOPED_TRACE(waiting);
    auto scheduler = MakeScheduler(4, 64, {16, absl::ZeroDuration()});
    std::vector<BatchProbe> probes(static_cast<size_t>(waiting));
    std::vector<Probe> holders(4);
    absl::Notification release;
    for (size_t i = 0; i < holders.size(); ++i) {
      scheduler->Submit(ProbeTask(holders[i], &release));
      while (scheduler->running() < int64_t(i) + 1) std::this_thread::yield();
    }
    for (auto& p : probes) scheduler->Submit(BatchTask(p, "k"));
    release.Notify();
    int ran = 0;
    for (auto& p : probes) {
      p.done.WaitForNotification();
      EXPECT_TRUE(p.status.ok()) << p.status;
      ran += p.ran_alone ? 1 : 0;
    }
    for (auto& h : holders) h.done.WaitForNotification();
    const std::vector<int> batches = DeviceOf(*scheduler).batches();
    for (const int b : batches) EXPECT_LE(b, (waiting + 3) / 4);
    for (const int b : batches) ran += b;
    EXPECT_EQ(ran, waiting);
  }
}

TEST(SchedulerBatching, BatchingOffRunsEveryTaskAlone) {
  auto scheduler = MakeScheduler(1, 64);  // max_batch_size 1
  std::vector<BatchProbe> probes(4);
  {
    BusyWorker busy(*scheduler);
    for (auto& p : probes) scheduler->Submit(BatchTask(p, "k"));
  }
  for (auto& p : probes) {
    p.done.WaitForNotification();
    EXPECT_TRUE(p.ran_alone);
  }
  EXPECT_TRUE(DeviceOf(*scheduler).batches().empty());
}

// A cancelled member, one past its deadline, one that cannot get its buffer
// and one whose job fails each end with their own status; the rest succeed
// together.
TEST(SchedulerBatching, OneBadMemberNeverFailsItsBatchMates) {
  auto scheduler = MakeScheduler(1, 64, {16, absl::ZeroDuration()});
  std::vector<BatchProbe> good(3);
  BatchProbe cancelled, late, no_buffer, failing;
  {
    BusyWorker busy(*scheduler);
    scheduler->Submit(BatchTask(good[0], "k"));
    Task c = BatchTask(cancelled, "k");
    c.cancelled = std::make_shared<std::atomic<bool>>(true);
    scheduler->Submit(std::move(c));
    scheduler->Submit(BatchTask(good[1], "k"));
    Task d = BatchTask(late, "k");
    d.deadline = absl::Now() - absl::Seconds(1);
    scheduler->Submit(std::move(d));
    scheduler->Submit(BatchTask(no_buffer, "k", -1));
    scheduler->Submit(BatchTask(failing, "k", FakeDevice::kFailingRows));
    scheduler->Submit(BatchTask(good[2], "k"));
  }
  for (auto& p : good) {
    p.done.WaitForNotification();
    EXPECT_TRUE(p.status.ok()) << p.status;
    EXPECT_EQ(p.batch_size, 4);  // the three and the failing job ran together
  }
  for (auto* p : {&cancelled, &late, &no_buffer, &failing}) p->done.WaitForNotification();
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
  EXPECT_EQ(late.status.code(), absl::StatusCode::kDeadlineExceeded) << late.status;
  EXPECT_EQ(no_buffer.status.code(), absl::StatusCode::kResourceExhausted) << no_buffer.status;
  EXPECT_EQ(failing.status.code(), absl::StatusCode::kInternal) << failing.status;
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{4}));
}

TEST(SchedulerBatching, ADelayHoldsTheFirstTaskForCompany) {
  auto scheduler = MakeScheduler(1, 64, {4, absl::Seconds(30)});
  std::vector<BatchProbe> probes(4);
  const absl::Time start = absl::Now();
  for (auto& p : probes) {
    scheduler->Submit(BatchTask(p, "k"));
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (auto& p : probes) {
    p.done.WaitForNotification();
    EXPECT_EQ(p.batch_size, 4);
  }
  // Full before the delay ran out: it ran at once.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(DeviceOf(*scheduler).batches(), (std::vector<int>{4}));
}

TEST(SchedulerBatching, ALoneTaskRunsOnceTheDelayHasPassed) {
  const absl::Duration delay = absl::Milliseconds(50);
  auto scheduler = MakeScheduler(1, 64, {4, delay});
  BatchProbe probe;
  const absl::Time start = absl::Now();
  scheduler->Submit(BatchTask(probe, "k"));
  probe.done.WaitForNotification();
  EXPECT_GE(absl::Now() - start, delay);
  EXPECT_TRUE(probe.status.ok());
  EXPECT_TRUE(probe.ran_alone);
}

// A batch held open counts as one busy worker, whatever its size: the
// device's other workers go on with other work.
TEST(SchedulerBatching, AnOpenBatchHoldsOneWorkerOnly) {
  auto scheduler = MakeScheduler(2, 64, {8, absl::Hours(1)});
  std::vector<BatchProbe> waiting(3);
  for (auto& p : waiting) scheduler->Submit(BatchTask(p, "k"));
  while (scheduler->running() < 3) std::this_thread::yield();
  Probe other;
  scheduler->Submit(ProbeTask(other));
  other.done.WaitForNotification();
  EXPECT_TRUE(other.status.ok());
  EXPECT_FALSE(waiting.front().done.HasBeenNotified());
  scheduler->Shutdown();
  for (auto& p : waiting) EXPECT_EQ(p.batch_size, 3);
}

TEST(SchedulerBatching, ShutdownEndsAnOpenBatchAndRunsIt) {
  auto scheduler = MakeScheduler(1, 64, {4, absl::Hours(1)});
  std::vector<BatchProbe> probes(2);
  for (auto& p : probes) scheduler->Submit(BatchTask(p, "k"));
  while (scheduler->running() < 2) std::this_thread::yield();
  scheduler->Shutdown();
  ExpectAnsweredAsOneBatch(probes);
}

}  // namespace
}  // namespace gpucompute::server
