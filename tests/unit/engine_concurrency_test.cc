// Nothing in the engine's path serializes concurrent requests: N calls on
// a device that runs N at once finish in about the time of one, not N times
// it, inline or with tensors read and a result kept. The device sleeps
// instead of computing, so two cores suffice.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/time/clock.h"
#include "gpucompute/kernels/registry.h"
#include "server/engine/compute_engine.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/variant_selector.h"
#include "support/host_device.h"

namespace gpucompute::server {
namespace {

constexpr int kCalls = 8;
constexpr absl::Duration kRunTime = absl::Milliseconds(100);

// Runs kCalls jobs at once, each taking kRunTime.
class SleepingDevice final : public testing::HostDevice {
 public:
  SleepingDevice() : HostDevice("sleeper", kCalls) {}
  absl::StatusOr<StageTimes> Execute(const ComputeJob&, const StopRequested&) override {
    absl::SleepFor(kRunTime);
    return StageTimes{};
  }
};

class EngineConcurrency : public ::testing::TestWithParam<bool> {
 protected:
  EngineConcurrency()
      : registry_(kernels::DefaultRegistry()),
        scheduler_(Devices(), /*max_queue_depth=*/64),
        selector_(registry_, kernels::Backend::kCpu),
        store_(TensorStoreOptions{int64_t{1} << 30, absl::Minutes(10), "test"}),
        engine_(registry_, scheduler_, selector_, kernels::Backend::kCpu, &store_) {}

  std::vector<std::unique_ptr<Device>> Devices() {
    auto device = std::make_unique<SleepingDevice>();
    device_ = device.get();
    std::vector<std::unique_ptr<Device>> devices;
    devices.push_back(std::move(device));
    return devices;
  }

  // A 16x16 MatMul: inline, or of two held tensors with the result kept.
  ComputeCall Call(bool tensors) {
    ComputeCall call;
    call.problem = {kernels::Op::kMatMul, kernels::DType::kFloat32, 16, 16, 16};
    call.variant = registry_.Find(kernels::Op::kMatMul, kernels::Backend::kCpu, "cpu_reference");
    if (tensors) {
      for (auto* operand : {&call.a_tensor, &call.b_tensor}) {
        auto t =
            store_.Create(*device_, {kernels::DType::kFloat32, 16, 16}, absl::InfiniteFuture());
        EXPECT_TRUE(t.ok()) << t.status();
        store_.Add(*t, absl::ZeroDuration());
        *operand = *t;
      }
      call.keep_output = true;
    }
    return call;
  }

  const kernels::Registry& registry_;
  SleepingDevice* device_ = nullptr;
  Scheduler scheduler_;
  VariantSelector selector_;
  TensorStore store_;
  ComputeEngine engine_;
};

TEST_P(EngineConcurrency, NCallsAtOnceTakeAboutAsLongAsOne) {
  const bool tensors = GetParam();
  std::vector<ComputeCall> calls;
  for (int i = 0; i < kCalls; ++i) calls.push_back(Call(tensors));
  absl::BlockingCounter done(kCalls);
  std::atomic<int> failed{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> submitters;
  for (ComputeCall& call : calls) {
    submitters.emplace_back([&, c = std::move(call)]() mutable {
      engine_.Compute(std::move(c), [&, tensors](absl::Status s, const ComputeOutcome& outcome) {
        // An inline call's result comes back; a kept one's stays held.
        if (!s.ok() || (outcome.result == nullptr) != tensors) ++failed;
        done.DecrementCount();
      });
    });
  }
  done.Wait();
  const absl::Duration took = absl::Now() - start;
  for (auto& t : submitters) t.join();
  EXPECT_EQ(failed.load(), 0);
  // One at a time would take kCalls * kRunTime (800 ms).
  EXPECT_LT(took, 3 * kRunTime) << "took " << took;
}

INSTANTIATE_TEST_SUITE_P(InlineAndKept, EngineConcurrency, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "TensorsInResultKept" : "Inline");
});

}  // namespace
}  // namespace gpucompute::server
