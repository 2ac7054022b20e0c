#include "server/engine/compute_engine.h"

#include <cstdint>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpucompute/common/stats.h"
#include "server/engine/work_key.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

// One line per calibrated bucket: what `auto` chose and each candidate's
// median (or why it failed), so an operator sees why.
void LogCalibration(const kernels::Problem& p, const kernels::Variant* chosen,
                    const std::vector<VariantMeasurement>& measured) {
  std::string times;
  bool as_served = false;
  for (const VariantMeasurement& m : measured) {
    as_served |= m.timed_as_served;
    absl::StrAppend(&times, times.empty() ? "" : ", ", m.variant->name, " ",
                    m.ok && !m.times_us.empty()
                        ? absl::StrFormat("%.1f us", common::Median(m.times_us))
                    : m.error.empty() ? std::string("failed")
                                      : absl::StrCat("failed [", m.error, "]"));
  }
  LogInfo(absl::StrCat("auto for ", VariantSelector::BucketKey(p), ": ",
                       chosen != nullptr ? chosen->name : std::string("none"), " (",
                       as_served ? "timed as served from host memory" : "kernels timed alone", ": ",
                       times, ")"));
}

StopRequested StopOf(const RequestLifetime& lifetime) {
  return [lifetime] { return lifetime.Stopped(); };
}

// Inputs and result, in bytes.
int64_t RequestBytes(const kernels::Problem& p) {
  return kernels::InputABytes(p) + kernels::InputBBytes(p) + kernels::OutputBytes(p);
}

TensorShape OutputShape(const kernels::Problem& p) {
  return {kernels::OutputDType(p), kernels::OutputRows(p), kernels::OutputCols(p)};
}

// Which of `auto`'s choices a request takes: with --calibrate_as_served, a
// small one whose matrices all travel in the call (no tensor, no region, no
// kept result) takes those timed as served from host memory. A larger one
// is copied up and run on device memory like any other, where kernels
// alone rank the variants.
ServedFrom ServedFromOf(const ComputeCall& c, bool calibrate_as_served) {
  const bool all_in_call =
      !c.a_tensor && !c.b_tensor && !c.keep_output && !c.a_region && !c.b_region && !c.out_region;
  return calibrate_as_served && all_in_call && RequestBytes(c.problem) <= kInlineRequestBytes
             ? ServedFrom::kHostMemory
             : ServedFrom::kDeviceMemory;
}

}  // namespace

int CalibrationRepetitions(const kernels::Problem& p) {
  return RequestBytes(p) <= kInlineRequestBytes ? 15 : 3;
}

std::string BatchKey(const kernels::Problem& p, const kernels::Variant* variant, bool on_device) {
  return WorkKey(variant, p, {on_device});
}

ComputeEngine::ComputeEngine(const kernels::Registry& registry, Scheduler& scheduler,
                             VariantSelector& selector, kernels::Backend backend,
                             TensorStore* tensors, ComputeEngineOptions options)
    : registry_(registry),
      scheduler_(scheduler),
      selector_(selector),
      backend_(backend),
      tensors_(tensors),
      options_(options) {}

void ComputeEngine::Compute(ComputeCall call,
                            std::function<void(absl::Status, ComputeOutcome&)> done) {
  ComputeOutcome refused;
  const kernels::Problem problem = call.problem;
  const ServedFrom served_from = ServedFromOf(call, options_.calibrate_as_served);
  VariantSelector::Choice choice;
  if (call.variant != nullptr) {
    choice.variant = call.variant;
  } else {
    choice = selector_.Choose(problem, call.allow_reduced_precision, served_from);
  }
  if (choice.variant == nullptr) {
    done(absl::InvalidArgumentError(
             absl::StrCat("variant: no ", kernels::OpName(problem.op), " variant supports ",
                          kernels::DTypeName(problem.dtype), " on this server")),
         refused);
    return;
  }
  if (tensors_ == nullptr && (call.keep_output || call.a_tensor || call.b_tensor)) {
    done(absl::FailedPreconditionError("this server holds no tensors"), refused);
    return;
  }
  auto memory = std::make_shared<CallMemory>(call.buffers, call.out_region);
  bool a_pinned = false, b_pinned = false;
  for (auto [region, pieces, pinned] : {std::tuple{&call.a_region, &call.a, &a_pinned},
                                        std::tuple{&call.b_region, &call.b, &b_pinned}}) {
    if (!*region) continue;
    auto operand = memory->Input(**region);
    if (!operand.ok()) {
      done(operand.status(), refused);
      return;
    }
    *pieces = std::move(operand->pieces);
    *pinned = operand->pinned;
  }

  auto outcome = std::make_shared<ComputeOutcome>();
  outcome->variant = choice.variant;
  auto shared_call = std::make_shared<ComputeCall>(std::move(call));
  Task task;
  task.deadline = shared_call->lifetime.deadline;
  task.cancelled = shared_call->lifetime.cancelled;
  // Work on a tensor runs where the tensor is (its first operand's device).
  if (shared_call->a_tensor) {
    task.device = &shared_call->a_tensor->device();
  } else if (shared_call->b_tensor) {
    task.device = &shared_call->b_tensor->device();
  }
  // A small kept result whose device is known gets its tensor here, if the memory is free right
  // now: then nothing in the task can wait, and it may run inline. Otherwise the task queues and
  // allocates on a worker, where waiting for memory holds back no gRPC thread.
  // The tensor is shared by the task's run and its batch part, whichever serves the call.
  const bool small = RequestBytes(problem) <= kInlineRequestBytes;
  auto kept = std::make_shared<std::shared_ptr<Tensor>>();
  if (small && shared_call->keep_output && task.device != nullptr && !choice.calibrate) {
    auto created = tensors_->Create(*task.device, OutputShape(problem), absl::Now());
    if (created.ok()) *kept = std::move(*created);
  }
  const bool nothing_waits = !shared_call->keep_output || *kept != nullptr;
  task.run = [this, shared_call, outcome, choice, served_from, memory, a_pinned, b_pinned,
              kept](Device& device) -> absl::Status {
    const ComputeCall& c = *shared_call;
    const StopRequested stop = StopOf(c.lifetime);
    ComputeJob job;
    job.problem = c.problem;
    job.variant = choice.variant;
    if (choice.calibrate) {
      // First request of this shape bucket: time every candidate once, on a
      // capped shape, and run the winner.
      // Warm caches: a quick ranking, paid by a waiting request.
      ProfileJob calibration{VariantSelector::CalibrationProblem(job.problem),
                             choice.candidates,
                             1,
                             CalibrationRepetitions(job.problem),
                             std::random_device{}(),
                             /*flush_cache=*/false};
      // Served from host memory, the candidates are timed as such a request
      // is served: on an H200 host, 64^3 MatMuls reading their operands
      // across the bus ran 48k/s through `tiled16` (the fastest kernel on
      // device memory) and 60-63k/s through `tiled32_padded` or
      // `register_tiled` at c=64.
      calibration.time_as_served_from_host = served_from == ServedFrom::kHostMemory;
      auto measured = device.Measure(calibration, stop);
      if (measured.ok()) {
        selector_.Record(job.problem, *measured, served_from);
        if (const kernels::Variant* best =
                selector_.Select(job.problem, c.allow_reduced_precision, served_from)) {
          job.variant = best;
        }
        LogCalibration(job.problem, job.variant, *measured);
      } else {
        selector_.AbandonCalibration(job.problem, served_from);
      }
    }
    outcome->variant = job.variant;
    job.a = c.a;
    job.b = c.b;
    job.a_pinned = a_pinned;
    job.b_pinned = b_pinned;
    job.out_pinned = memory->output_pinned();
    if (c.a_tensor) job.a_resident = &c.a_tensor->memory();
    if (c.b_tensor) job.b_resident = &c.b_tensor->memory();
    if (c.keep_output) {
      if (!*kept) {
        auto created = tensors_->Create(device, OutputShape(job.problem), c.lifetime.deadline);
        if (!created.ok()) return created.status();
        *kept = std::move(*created);
      }
      job.out_resident = &(*kept)->memory();
    } else {
      job.out = memory->Output(size_t(kernels::OutputBytes(job.problem)));
    }
    auto times = device.Execute(job, stop);
    if (!times.ok()) return times.status();
    outcome->times = *times;
    Settle(c, *kept, *outcome);
    return absl::OkStatus();
  };
  if (!choice.calibrate) {
    const bool by_dma = a_pinned || b_pinned || memory->output_pinned();
    task.batch =
        BatchPartOf(shared_call, choice.variant, memory, outcome, kept, by_dma, task.device);
    // Waiting for company is the point of a delay: such tasks always queue.
    task.may_run_inline = small && nothing_waits &&
                          !(task.batch && scheduler_.batching().delay > absl::ZeroDuration());
  }
  task.done = [outcome, memory, done = std::move(done)](absl::Status status, Device* device,
                                                        int64_t queue_us) {
    outcome->device = device;
    outcome->queue_us = queue_us;
    if (status.ok()) status = memory->Finish();
    if (status.ok()) outcome->result = memory->TakeResult();
    done(status, *outcome);
  };
  scheduler_.Submit(std::move(task));
}

void ComputeEngine::Settle(const ComputeCall& c, std::shared_ptr<Tensor>& kept,
                           ComputeOutcome& outcome) const {
  for (const auto* t : {&c.a_tensor, &c.b_tensor}) {
    if (*t) tensors_->Touch(**t);
  }
  // A caller gone by now would never learn the new tensor's id: it is
  // dropped instead of listed.
  if (kept && !c.lifetime.Stopped()) outcome.kept = tensors_->Add(std::move(kept), c.keep_ttl);
}

std::optional<BatchPart> ComputeEngine::BatchPartOf(
    const std::shared_ptr<ComputeCall>& call, const kernels::Variant* variant,
    const std::shared_ptr<CallMemory>& memory, const std::shared_ptr<ComputeOutcome>& outcome,
    const std::shared_ptr<std::shared_ptr<Tensor>>& kept, bool by_dma, const Device* device) const {
  const ComputeCall& c = *call;
  const kernels::Problem& p = c.problem;
  const BatchingOptions& batching = scheduler_.batching();
  if (batching.max_batch_size <= 1 || by_dma) return std::nullopt;
  // Two placements batch: everything in host memory (inputs sent in the
  // call or read from a region's file into pooled buffers, the result
  // returned or written to its region when the call ends), and everything
  // on one device (tensors read, the result kept). The latter only with its
  // tensor made ahead: a batch may run on a gRPC thread, which must never
  // wait for device memory.
  const bool in_host_memory = !c.keep_output && !c.a_tensor && !c.b_tensor;
  const bool on_device =
      c.keep_output && *kept != nullptr && c.a_tensor &&
      (kernels::InputBBytes(p) == 0 ? !c.b_tensor
                                    : c.b_tensor && &c.b_tensor->device() == &c.a_tensor->device());
  if (!in_host_memory && !on_device) return std::nullopt;
  const int64_t out_bytes = kernels::OutputBytes(p);
  if (RequestBytes(p) > kMaxBatchedRequestBytes) return std::nullopt;
  // A request that finds its device idle runs alone (without a delay
  // nothing holds it for company), as with batching off: no part is built
  // for it and dropped unused. Checked last: it reads counters other
  // threads write, which a call that never batches need not touch.
  if (batching.delay <= absl::ZeroDuration() && scheduler_.Idle(device)) return std::nullopt;
  BatchPart part;
  part.key = BatchKey(p, variant, on_device);
  part.prepare = [call, variant, memory, out_bytes, on_device,
                  kept](Device&) -> absl::StatusOr<ComputeJob> {
    ComputeJob job;
    job.problem = call->problem;
    job.variant = variant;
    if (!on_device) {
      job.a = call->a;
      job.b = call->b;
      job.out = memory->Output(size_t(out_bytes));
      return job;
    }
    job.a_resident = &call->a_tensor->memory();
    if (call->b_tensor) job.b_resident = &call->b_tensor->memory();
    job.out_resident = &(*kept)->memory();
    return job;
  };
  part.finish = [this, call, outcome, kept](absl::StatusOr<StageTimes> result, int batch_size) {
    if (!result.ok()) return result.status();
    outcome->times = std::move(*result);
    outcome->batch_size = batch_size;
    Settle(*call, *kept, *outcome);
    return absl::OkStatus();
  };
  return part;
}

void ComputeEngine::Profile(ProfileCall call,
                            std::function<void(absl::Status, const ProfileOutcome&)> done) {
  if (call.job.variants.empty()) {
    for (const kernels::Variant* v : registry_.List(call.job.problem.op, backend_)) {
      if (v->Supports(call.job.problem.dtype)) call.job.variants.push_back(v);
    }
  }
  auto outcome = std::make_shared<ProfileOutcome>();
  Task task;
  task.deadline = call.lifetime.deadline;
  task.cancelled = call.lifetime.cancelled;
  task.run = [job = call.job, lifetime = call.lifetime, outcome](Device& device) -> absl::Status {
    auto measured = device.Measure(job, StopOf(lifetime));
    if (!measured.ok()) return measured.status();
    outcome->measured = std::move(*measured);
    outcome->flush_cache = job.flush_cache;
    return absl::OkStatus();
  };
  task.done = [this, problem = call.job.problem, outcome, done = std::move(done)](
                  absl::Status status, Device* device, int64_t queue_us) {
    outcome->device = device;
    outcome->queue_us = queue_us;
    if (status.ok()) {
      selector_.Record(problem, outcome->measured);
      outcome->selected = selector_.Select(problem, false);
    }
    done(status, *outcome);
  };
  scheduler_.Submit(std::move(task));
}

}  // namespace gpucompute::server
