// Where the engine runs a request: a small one on the thread that submits
// it, unless something in it could wait; a result kept as a tensor gets its
// memory up front only when the memory is there at once, and otherwise the
// request queues for a worker, which allocates with the request's deadline.
#include "server/engine/compute_engine.h"
#include "server/engine/work_key.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gpucompute/kernels/registry.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/variant_selector.h"
#include "support/host_device.h"

namespace gpucompute::server {
namespace {

// A device that runs nothing, notes the thread each job ran on, and whose
// tensor memory is either free at once or comes only to those who wait.
class ProbeDevice final : public testing::HostDevice {
 public:
  ProbeDevice() : HostDevice("probe") {}
  absl::StatusOr<StageTimes> Execute(const ComputeJob&, const StopRequested&) override {
    absl::MutexLock lock(&mu_);
    ran_on_ = std::this_thread::get_id();
    return StageTimes{};
  }
  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int64_t bytes,
                                                                   absl::Time deadline) override {
    absl::MutexLock lock(&mu_);
    deadlines_.push_back(deadline);
    // Not free now: only a caller willing to wait (a deadline ahead) gets it.
    if (!free_now_ && deadline <= absl::Now()) {
      return absl::ResourceExhaustedError("device memory is not free now");
    }
    return std::make_unique<testing::HostResidentMemory>(bytes);
  }

  void set_free_now(bool free) {
    absl::MutexLock lock(&mu_);
    free_now_ = free;
  }
  std::thread::id ran_on() const {
    absl::MutexLock lock(&mu_);
    return ran_on_;
  }
  std::vector<absl::Time> deadlines() const {
    absl::MutexLock lock(&mu_);
    return deadlines_;
  }

 private:
  mutable absl::Mutex mu_;
  bool free_now_ ABSL_GUARDED_BY(mu_) = true;
  std::thread::id ran_on_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Time> deadlines_ ABSL_GUARDED_BY(mu_);
};

// A scheduler's one device, made here; `*made` points at it.
template <typename D>
std::vector<std::unique_ptr<Device>> OneDevice(D** made) {
  auto device = std::make_unique<D>();
  *made = device.get();
  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(std::move(device));
  return devices;
}

class EngineInline : public ::testing::Test {
 protected:
  EngineInline()
      : registry_(kernels::DefaultRegistry()),
        scheduler_(OneDevice(&device_), /*max_queue_depth=*/16),
        selector_(registry_, kernels::Backend::kCpu),
        store_(TensorStoreOptions{int64_t{1} << 30, absl::Minutes(10), "test"}),
        engine_(registry_, scheduler_, selector_, kernels::Backend::kCpu, &store_) {}

  // A square FP32 tensor of `side` held on the device.
  std::shared_ptr<Tensor> Held(int64_t side) {
    auto t =
        store_.Create(*device_, {kernels::DType::kFloat32, side, side}, absl::InfiniteFuture());
    EXPECT_TRUE(t.ok()) << t.status();
    store_.Add(*t, absl::ZeroDuration());
    return *t;
  }

  // MatMul of two held side x side tensors, the result kept. Returns once
  // done ran; `*before_return`: done had run before Compute returned.
  ComputeOutcome KeptMatMul(int64_t side, absl::Time deadline, bool* before_return) {
    ComputeCall call;
    call.problem = {kernels::Op::kMatMul, kernels::DType::kFloat32, side, side, side};
    call.variant = registry_.Find(kernels::Op::kMatMul, kernels::Backend::kCpu, "cpu_reference");
    call.a_tensor = Held(side);
    call.b_tensor = Held(side);
    call.keep_output = true;
    call.lifetime.deadline = deadline;
    absl::Notification done;
    ComputeOutcome result;
    absl::Status status;
    engine_.Compute(std::move(call), [&](absl::Status s, ComputeOutcome& outcome) {
      status = s;
      result = std::move(outcome);
      done.Notify();
    });
    *before_return = done.HasBeenNotified();
    done.WaitForNotification();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_TRUE(result.kept.has_value());
    return result;
  }

  const kernels::Registry& registry_;
  ProbeDevice* device_ = nullptr;
  Scheduler scheduler_;
  VariantSelector selector_;
  TensorStore store_;
  ComputeEngine engine_;
};

TEST_F(EngineInline, ASmallKeptResultWithMemoryAtHandRunsOnTheSubmittingThread) {
  bool before_return = false;
  KeptMatMul(8, absl::InfiniteFuture(), &before_return);
  EXPECT_TRUE(before_return);
  EXPECT_EQ(device_->ran_on(), std::this_thread::get_id());
}

TEST_F(EngineInline, ASmallKeptResultThatMustWaitForMemoryQueuesForAWorker) {
  const absl::Time deadline = absl::Now() + absl::Minutes(1);
  device_->set_free_now(false);
  bool before_return = true;
  KeptMatMul(8, deadline, &before_return);
  EXPECT_NE(device_->ran_on(), std::this_thread::get_id());
  // Tried at once on this thread, then waited for on the worker until the
  // request's own deadline.
  const std::vector<absl::Time> asked = device_->deadlines();
  ASSERT_GE(asked.size(), 2u);
  EXPECT_LE(asked[asked.size() - 2], absl::Now());
  EXPECT_EQ(asked.back(), deadline);
}

TEST_F(EngineInline, ALargeKeptResultAlwaysRunsOnAWorker) {
  bool before_return = true;
  KeptMatMul(128, absl::InfiniteFuture(), &before_return);  // 192 KiB in all
  EXPECT_NE(device_->ran_on(), std::this_thread::get_id());
}

// A device whose Execute waits at a gate until it opens, and which notes
// the size of each batch it runs.
class GateDevice final : public testing::HostDevice {
 public:
  GateDevice() : HostDevice("gate") {}
  absl::StatusOr<StageTimes> Execute(const ComputeJob&, const StopRequested&) override {
    {
      absl::MutexLock lock(&mu_);
      ++started_;
    }
    gate_.WaitForNotification();
    return StageTimes{};
  }
  std::vector<absl::StatusOr<StageTimes>> ExecuteBatch(absl::Span<const ComputeJob> jobs,
                                                       absl::Span<const StopRequested>) override {
    absl::MutexLock lock(&mu_);
    batches_.push_back(int(jobs.size()));
    return std::vector<absl::StatusOr<StageTimes>>(jobs.size(), StageTimes{});
  }
  void Open() { gate_.Notify(); }
  int started() const {
    absl::MutexLock lock(&mu_);
    return started_;
  }
  std::vector<int> batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }

 private:
  absl::Notification gate_;
  mutable absl::Mutex mu_;
  int started_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int> batches_ ABSL_GUARDED_BY(mu_);
};

// Batching on, no delay: a request that finds its device idle runs alone,
// as with batching off, and those that arrive while it runs still batch.
TEST(EngineBatching, ARequestAtAnIdleDeviceRunsAloneAndThoseBehindItBatch) {
  const kernels::Registry& registry = kernels::DefaultRegistry();
  GateDevice* device = nullptr;
  Scheduler scheduler(OneDevice(&device), /*max_queue_depth=*/16, {.max_batch_size = 4});
  VariantSelector selector(registry, kernels::Backend::kCpu);
  TensorStore store(TensorStoreOptions{int64_t{1} << 30, absl::Minutes(10), "test"});
  ComputeEngine engine(registry, scheduler, selector, kernels::Backend::kCpu, &store);
  const std::string operand(8 * 8 * sizeof(float), '\1');
  constexpr int kRequests = 4;
  std::vector<int> batch_sizes(kRequests, 0);
  std::vector<absl::Notification> done(kRequests);
  auto send = [&](int i) {
    ComputeCall call;
    call.problem = {kernels::Op::kMatMul, kernels::DType::kFloat32, 8, 8, 8};
    call.variant = registry.Find(kernels::Op::kMatMul, kernels::Backend::kCpu, "cpu_reference");
    call.a = {absl::MakeConstSpan(operand)};
    call.b = {absl::MakeConstSpan(operand)};
    engine.Compute(std::move(call), [&, i](absl::Status s, ComputeOutcome& outcome) {
      EXPECT_TRUE(s.ok()) << s;
      batch_sizes[i] = outcome.batch_size;
      done[i].Notify();
    });
  };
  ASSERT_TRUE(scheduler.Idle(nullptr));
  // Small and idle: the first runs on the thread that sends it, at the gate.
  std::thread first(send, 0);
  while (device->started() == 0) std::this_thread::yield();
  for (int i = 1; i < kRequests; ++i) send(i);  // they queue behind it
  device->Open();
  first.join();
  for (auto& d : done) d.WaitForNotification();
  EXPECT_EQ(device->batches(), std::vector<int>{kRequests - 1});
  EXPECT_EQ(batch_sizes, (std::vector<int>{1, 3, 3, 3}));
}

// With --calibrate_as_served, `auto` keeps the choices of requests whose
// matrices travel in the call apart from those of requests on tensors: each
// kind calibrates once, the way it runs, and a Profile (kernels alone) sets
// only the tensors' choice.
class MeasuringDevice final : public testing::HostDevice {
 public:
  MeasuringDevice() : HostDevice("measuring") {}
  // Timed alone, "near" wins; timed as served from host memory, "far".
  // "broken" fails its check, and so is never timed.
  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                          const StopRequested&) override {
    absl::MutexLock lock(&mu_);
    measured_as_served_.push_back(job.time_as_served_from_host);
    repetitions_.push_back(job.repetitions);
    std::vector<VariantMeasurement> out;
    for (const kernels::Variant* v : job.variants) {
      VariantMeasurement m;
      m.variant = v;
      m.ok = v->name != "broken";
      if (!m.ok) m.error = "max error 1.0 against the reference";
      const bool wins = (v->name == "far") == job.time_as_served_from_host;
      if (m.ok) m.times_us.assign(3, wins ? 10.0 : 30.0);
      m.timed_as_served = job.time_as_served_from_host;
      out.push_back(m);
    }
    return out;
  }
  absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested&) override {
    absl::MutexLock lock(&mu_);
    ran_.push_back(job.variant->name);
    return StageTimes{};
  }
  std::vector<bool> measured_as_served() const {
    absl::MutexLock lock(&mu_);
    return measured_as_served_;
  }
  std::vector<int> repetitions() const {
    absl::MutexLock lock(&mu_);
    return repetitions_;
  }
  std::string last_ran() const {
    absl::MutexLock lock(&mu_);
    return ran_.empty() ? "" : ran_.back();
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<bool> measured_as_served_ ABSL_GUARDED_BY(mu_);
  std::vector<int> repetitions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ran_ ABSL_GUARDED_BY(mu_);
};

class EngineAutoServedFrom : public ::testing::Test {
 protected:
  EngineAutoServedFrom()
      : registry_(Ladder()),
        scheduler_(OneDevice(&device_), /*max_queue_depth=*/16),
        selector_(registry_, kernels::Backend::kCpu),
        store_(TensorStoreOptions{int64_t{1} << 30, absl::Minutes(10), "test"}),
        engine_(registry_, scheduler_, selector_, kernels::Backend::kCpu, &store_,
                {.calibrate_as_served = true}) {}

  static kernels::Registry Ladder() {
    kernels::Registry ladder;
    for (const char* name : {"near", "far", "broken"}) {
      kernels::Variant v;
      v.name = name;
      v.op = kernels::Op::kMatMul;
      v.backend = kernels::Backend::kCpu;
      v.dtypes = {kernels::DType::kFloat32};
      v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
      EXPECT_TRUE(ladder.Add(v).ok());
    }
    return ladder;
  }

  // An "auto" MatMul of side x side matrices, its operands in the call or
  // held as tensors; returns the variant that ran.
  std::string Run(bool on_tensors, int64_t side = 8) {
    ComputeCall call;
    call.problem = {kernels::Op::kMatMul, kernels::DType::kFloat32, side, side, side};
    const std::string operand(side * side * sizeof(float), '\1');
    if (on_tensors) {
      for (std::shared_ptr<Tensor>* t : {&call.a_tensor, &call.b_tensor}) {
        auto held =
            store_.Create(*device_, {kernels::DType::kFloat32, side, side}, absl::InfiniteFuture());
        EXPECT_TRUE(held.ok()) << held.status();
        *t = *held;
      }
    } else {
      call.a = {absl::MakeConstSpan(operand)};
      call.b = {absl::MakeConstSpan(operand)};
    }
    absl::Notification done;
    absl::Status status;
    std::string ran;
    engine_.Compute(std::move(call), [&](absl::Status s, ComputeOutcome& outcome) {
      status = s;
      ran = outcome.variant != nullptr ? outcome.variant->name : "";
      done.Notify();
    });
    done.WaitForNotification();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(ran, device_->last_ran());
    return ran;
  }

  kernels::Registry registry_;
  MeasuringDevice* device_ = nullptr;
  Scheduler scheduler_;
  VariantSelector selector_;
  TensorStore store_;
  ComputeEngine engine_;
};

TEST_F(EngineAutoServedFrom, RequestsServedFromHostAndOnTensorsCalibrateApart) {
  EXPECT_EQ(Run(/*on_tensors=*/false), "far");
  EXPECT_EQ(Run(/*on_tensors=*/true), "near");
  EXPECT_EQ(Run(/*on_tensors=*/false), "far");
  EXPECT_EQ(Run(/*on_tensors=*/true), "near");
  EXPECT_EQ(device_->measured_as_served(), (std::vector<bool>{true, false}));

  // A Profile times kernels alone; it leaves the served choice as it was.
  ProfileCall profile;
  profile.job.problem = {kernels::Op::kMatMul, kernels::DType::kFloat32, 8, 8, 8};
  absl::Notification profiled;
  engine_.Profile(std::move(profile), [&](absl::Status s, const ProfileOutcome& outcome) {
    EXPECT_TRUE(s.ok()) << s;
    ASSERT_NE(outcome.selected, nullptr);
    EXPECT_EQ(outcome.selected->name, "near");
    profiled.Notify();
  });
  profiled.WaitForNotification();
  EXPECT_EQ(Run(/*on_tensors=*/false), "far");
  EXPECT_EQ(device_->measured_as_served(), (std::vector<bool>{true, false, false}));

  // Past the small-request bound (128^3: 192 KiB in all), matrices in the
  // call are copied up: such a request calibrates kernels alone.
  EXPECT_EQ(Run(/*on_tensors=*/false, 128), "near");
  EXPECT_EQ(Run(/*on_tensors=*/true, 128), "near");
  EXPECT_EQ(device_->measured_as_served(), (std::vector<bool>{true, false, false, false}));
}

// A small request's bucket is ranked on 15 timings of each candidate, as
// served or on device memory alike; past the small-request bound, on 3.
TEST_F(EngineAutoServedFrom, SmallRequestsCalibrateOnMoreTimings) {
  Run(/*on_tensors=*/false);
  Run(/*on_tensors=*/true);
  Run(/*on_tensors=*/true, 128);
  EXPECT_EQ(device_->repetitions(), (std::vector<int>{15, 15, 3}));
  const kernels::Problem small{kernels::Op::kTranspose, kernels::DType::kFloat32, 64, 64};
  const kernels::Problem large{kernels::Op::kTranspose, kernels::DType::kFloat32, 4096, 4096};
  EXPECT_EQ(CalibrationRepetitions(small), 15);
  EXPECT_EQ(CalibrationRepetitions(large), 3);
}

// Work keys (batch queues, CUDA graph caches): the same work gives the same
// key, and any one field of the problem, the variant or a caller's word
// apart gives another, so that nothing is batched with or replayed for work
// that differs.
TEST(WorkKeyTest, EqualForTheSameWorkOnlyEachFieldOrWordApartDiffers) {
  const kernels::Variant one, other;  // told apart by address, as the registry's are
  const kernels::Problem base{kernels::Op::kMatMul, kernels::DType::kFloat16, 64, 32, 16};
  const float a = 0, b = 0;
  const std::string key = WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4096, 1});
  EXPECT_EQ(key, WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4096, 1}));

  std::vector<kernels::Problem> apart(8, base);
  apart[0].op = kernels::Op::kTranspose;
  apart[1].dtype = kernels::DType::kBFloat16;
  apart[2].m = 65;
  apart[3].n = 33;
  apart[4].k = 17;
  apart[5].reduce_op = kernels::ReduceOp::kMax;
  apart[6].reduce_axis = kernels::ReduceAxis::kPerRow;
  apart[7].float32_output = true;
  for (size_t i = 0; i < apart.size(); ++i) {
    EXPECT_NE(WorkKey(&one, apart[i], {KeyWord(&a), KeyWord(&b), 4096, 1}), key) << "field " << i;
  }
  EXPECT_NE(WorkKey(&other, base, {KeyWord(&a), KeyWord(&b), 4096, 1}), key);
  // The caller's words: each one, their order, and how many there are.
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&b), KeyWord(&b), 4096, 1}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&a), KeyWord(&a), 4096, 1}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4095, 1}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4096, 0}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&b), KeyWord(&a), 4096, 1}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4096}), key);
  EXPECT_NE(WorkKey(&one, base, {KeyWord(&a), KeyWord(&b), 4096, 1, 0}), key);
  EXPECT_NE(WorkKey(&one, base, {2}), WorkKey(&one, base));
}

// Batch mates share the work and its placement: on the device or not apart
// gives another batch key.
TEST(BatchKeyTest, TheWorkAndWhetherAllIsOnTheDevice) {
  const kernels::Variant one, other;
  const kernels::Problem base{kernels::Op::kMatMul, kernels::DType::kFloat16, 64, 32, 16};
  kernels::Problem wider = base;
  wider.n = 33;
  EXPECT_EQ(BatchKey(base, &one, false), BatchKey(base, &one, false));
  EXPECT_NE(BatchKey(base, &one, true), BatchKey(base, &one, false));
  EXPECT_NE(BatchKey(wider, &one, false), BatchKey(base, &one, false));
  EXPECT_NE(BatchKey(base, &other, false), BatchKey(base, &one, false));
}

}  // namespace
}  // namespace gpucompute::server
