// The scheduler's dispatch: tasks run on the device's workers, wait in the
// queue while every worker is busy, and a full queue refuses with
// RESOURCE_EXHAUSTED.
#include "server/engine/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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
  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob&,
                                                          const StopRequested&) override {
    return std::vector<VariantMeasurement>{};
  }

 private:
  const int concurrency_;
  DeviceDescription description_;
  Ceilings ceilings_;
};

std::unique_ptr<Scheduler> MakeScheduler(int concurrency, int max_queue_depth) {
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::make_unique<FakeDevice>(concurrency));
  return std::make_unique<Scheduler>(std::move(devices), max_queue_depth);
}

// Submits a task that records the thread it ran on and its final status.
struct Probe {
  std::thread::id ran_on;
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
    probe.done.Notify();
  };
  return task;
}

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

}  // namespace
}  // namespace gpucompute::server
