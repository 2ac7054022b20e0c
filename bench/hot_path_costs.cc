// gpucompute-hot-path-costs: what the steps every call takes cost it, in
// nanoseconds, when 1 to N threads take them at once (as gRPC's threads do
// on a loaded server), all on the same series, bucket and device:
//   metrics    RequestStarted, then RequestFinished of a successful 64^3
//              MatMul with its five stage latencies, batch size and bytes;
//   auto       VariantSelector::Choose for a bucket already chosen (a MatMul
//              on a ladder of three), and for one with a single candidate
//              (every op on the CPU backend), which is never chosen;
//   scheduler  Scheduler::Submit of a small task that does no work, on a
//              device of --device_concurrency streams, until it is answered:
//              one that never batches (a kept output), and one that may
//              (its batch part built as the engine builds it, batches of up
//              to 16), which runs alone unless others wait; and the latter
//              as the engine submits it, with no batch part where the device
//              is idle (Scheduler::Idle);
//   tensors    TensorStore::Use of one listed tensor, the use marked again
//              when the work ends, and the reference dropped: what each call
//              pays per operand when every call reads the same tensor (a
//              model's weights).
// Rounds alternate over the thread counts; the median round of each is
// printed. A cost that grows with the threads is a cache line they take
// turns on.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/kernels/dtype.h"
#include "gpucompute/kernels/registry.h"
#include "server/engine/compute_engine.h"
#include "server/engine/scheduler.h"
#include "server/engine/tensor_store.h"
#include "server/engine/variant_selector.h"
#include "server/ops/metrics.h"

ABSL_FLAG(std::string, threads, "1,2,4,8,16", "thread counts to time, comma-separated");
ABSL_FLAG(int32_t, calls, 500000, "calls each thread makes per round");
ABSL_FLAG(int32_t, rounds, 5, "rounds over the thread counts");
ABSL_FLAG(int32_t, device_concurrency, 8,
          "the scheduler rows' device: tasks it runs at once (a GPU's stream slots)");

namespace {

using gpucompute::kernels::Backend;
using gpucompute::kernels::Op;
using gpucompute::kernels::Problem;
using gpucompute::server::BatchPart;
using gpucompute::server::ComputeJob;
using gpucompute::server::ComputeRpcOp;
using gpucompute::server::Device;
using gpucompute::server::Metrics;
using gpucompute::server::Scheduler;
using gpucompute::server::StageLatencies;
using gpucompute::server::StageTimes;
using gpucompute::server::Task;
using gpucompute::server::TensorStore;
using gpucompute::server::TensorStoreOptions;
using gpucompute::server::VariantMeasurement;
using gpucompute::server::VariantSelector;

// Nanoseconds per call per thread, `threads` making `calls` each at once.
double NanosPerCall(int threads, int calls, const std::function<void()>& call) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < calls; ++i) call();
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return seconds * 1e9 / calls;
}

gpucompute::kernels::Variant Variant(Op op, const std::string& name) {
  gpucompute::kernels::Variant v;
  v.op = op;
  v.name = name;
  v.backend = Backend::kCuda;
  v.dtypes = {gpucompute::kernels::DType::kFloat32};
  v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
  return v;
}

// A device whose work takes no time: what is left is the scheduler's.
class NullDevice final : public Device {
 public:
  explicit NullDevice(int concurrency) : concurrency_(concurrency) { description_.name = "null"; }
  const gpucompute::server::DeviceDescription& description() const override { return description_; }
  const gpucompute::server::Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return concurrency_; }
  absl::StatusOr<StageTimes> Execute(const ComputeJob&,
                                     const gpucompute::server::StopRequested&) override {
    return StageTimes{};
  }
  absl::StatusOr<std::vector<VariantMeasurement>> Measure(
      const gpucompute::server::ProfileJob&, const gpucompute::server::StopRequested&) override {
    return std::vector<VariantMeasurement>{};
  }
  absl::StatusOr<std::unique_ptr<gpucompute::server::ResidentMemory>> AllocateResident(
      int64_t bytes, absl::Time) override {
    return std::unique_ptr<gpucompute::server::ResidentMemory>(new HostMemory(bytes));
  }

 private:
  class HostMemory final : public gpucompute::server::ResidentMemory {
   public:
    explicit HostMemory(int64_t bytes) : data_(size_t(bytes)) {}
    void* data() const override { return const_cast<char*>(data_.data()); }
    int64_t bytes() const override { return int64_t(data_.size()); }

   private:
    std::vector<char> data_;
  };

  const int concurrency_;
  gpucompute::server::DeviceDescription description_;
  gpucompute::server::Ceilings ceilings_;
};

// Submits one task that does no work and waits for its answer, as a gRPC
// thread hands a call to the scheduler (a task that runs inline is answered
// before Submit returns; one that queued, by whichever thread runs it).
void SubmitAndWait(Scheduler& scheduler, bool batchable, bool unless_idle = false) {
  absl::Notification answered;
  Task task;
  task.may_run_inline = true;
  task.run = [](Device&) { return absl::OkStatus(); };
  task.done = [&answered](absl::Status, Device*, int64_t) { answered.Notify(); };
  if (batchable && !(unless_idle && scheduler.Idle(nullptr))) {
    // What ComputeEngine::BatchPartOf makes for a 64^3 MatMul.
    const Problem p{Op::kMatMul, gpucompute::kernels::DType::kFloat32, 64, 64, 64};
    BatchPart part;
    part.key = gpucompute::server::BatchKey(p, nullptr, /*on_device=*/false);
    auto job = std::make_shared<ComputeJob>();
    part.prepare = [job, p](Device&) -> absl::StatusOr<ComputeJob> {
      ComputeJob out = *job;
      out.problem = p;
      return out;
    };
    part.finish = [job](absl::StatusOr<StageTimes> result, int) { return result.status(); };
    task.batch = std::move(part);
  }
  scheduler.Submit(std::move(task));
  answered.WaitForNotification();
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      std::fprintf(stderr, "--threads: \"%s\" is not a positive count\n",
                   std::string(part).c_str());
      return 2;
    }
    counts.push_back(n);
  }
  const int calls = std::max(1, absl::GetFlag(FLAGS_calls));

  Metrics metrics;
  StageLatencies done;
  done.queue_us = 1;
  done.upload_us = 4;
  done.compute_us = 12;
  done.download_us = 3;
  done.total_us = 30;
  done.batch_size = 1;
  auto record = [&] {
    metrics.RequestStarted();
    metrics.RequestFinished(ComputeRpcOp(Op::kMatMul), {"fastest", "float32", "cuda:0", 49152},
                            absl::StatusCode::kOk, done);
  };

  gpucompute::kernels::Registry registry;
  for (const char* name : {"slowest", "fastest", "middle"}) {
    if (!registry.Add(Variant(Op::kMatMul, name)).ok()) return 1;
  }
  if (!registry.Add(Variant(Op::kTranspose, "only")).ok()) return 1;
  VariantSelector selector(registry, Backend::kCuda);
  Problem matmul{Op::kMatMul, gpucompute::kernels::DType::kFloat32, 64, 64, 64};
  std::vector<VariantMeasurement> measured;
  for (const auto* v : registry.List(Op::kMatMul, Backend::kCuda)) {
    VariantMeasurement m;
    m.variant = v;
    m.ok = true;
    m.times_us = {v->name == "fastest" ? 9.0 : 12.0};
    measured.push_back(m);
  }
  selector.Record(matmul, measured);
  Problem transpose{Op::kTranspose, gpucompute::kernels::DType::kFloat32, 1, 1};
  auto chosen = [&] { selector.Choose(matmul, false); };
  auto single = [&] { selector.Choose(transpose, false); };

  std::vector<std::unique_ptr<Device>> devices;
  devices.push_back(
      std::make_unique<NullDevice>(std::max(1, absl::GetFlag(FLAGS_device_concurrency))));
  gpucompute::server::BatchingOptions batching;
  batching.max_batch_size = 16;
  Scheduler scheduler(std::move(devices), /*max_queue_depth=*/1 << 20, batching);
  auto never_batches = [&] { SubmitAndWait(scheduler, false); };
  auto may_batch = [&] { SubmitAndWait(scheduler, true); };
  auto may_batch_unless_idle = [&] { SubmitAndWait(scheduler, true, /*unless_idle=*/true); };

  TensorStore store(TensorStoreOptions{int64_t{1} << 30, absl::Minutes(10), "bench"});
  NullDevice holder(1);
  auto weights =
      store.Create(holder, {gpucompute::kernels::DType::kFloat32, 64, 64}, absl::InfiniteFuture());
  if (!weights.ok()) return 1;
  const std::string weights_id = store.Add(*weights, absl::ZeroDuration()).id;
  auto shared_tensor = [&] {
    auto used = store.Use(weights_id, "a");
    if (used.ok()) TensorStore::Touch(**used);
  };

  struct Row {
    const char* name;
    std::function<void()> call;
    std::vector<std::vector<double>> rounds;
  };
  std::vector<Row> rows = {{"metrics", record, {}},
                           {"auto, chosen bucket", chosen, {}},
                           {"auto, one candidate", single, {}},
                           {"scheduler, never batches", never_batches, {}},
                           {"scheduler, may batch", may_batch, {}},
                           {"scheduler, may batch, none when idle", may_batch_unless_idle, {}},
                           {"tensors, one shared by every call", shared_tensor, {}}};
  for (Row& row : rows) {
    row.call();  // the series made, the code warm
    row.rounds.resize(counts.size());
  }
  for (int r = 0; r < std::max(1, absl::GetFlag(FLAGS_rounds)); ++r) {
    for (Row& row : rows) {
      for (size_t i = 0; i < counts.size(); ++i) {
        row.rounds[i].push_back(NanosPerCall(counts[i], calls, row.call));
      }
    }
  }
  std::printf("ns per call, each thread: median round (lowest-highest)\n\n| step |");
  for (int n : counts) std::printf(" %d thread%s |", n, n == 1 ? "" : "s");
  std::printf("\n|---|");
  for (size_t i = 0; i < counts.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (const Row& row : rows) {
    std::printf("| %s |", row.name);
    for (const auto& rounds : row.rounds) {
      const auto [low, high] = std::minmax_element(rounds.begin(), rounds.end());
      std::printf(" %.0f (%.0f-%.0f) |", gpucompute::common::Median(rounds), *low, *high);
    }
    std::printf("\n");
  }
  return 0;
}
