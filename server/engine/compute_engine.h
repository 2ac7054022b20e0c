// The engine's front door: one compute request or Profile in, one outcome
// out, on a device worker (a small request may run on the caller's thread:
// see kInlineRequestBytes). It picks the variant ("auto" asks the
// selector, and the first request of a new shape bucket calibrates it),
// admits the work to the scheduler, runs it on a device, and reports what
// ran and how long each stage took. Knows nothing of gRPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/kernels/registry.h"
#include "server/engine/call_memory.h"
#include "server/engine/device.h"
#include "server/engine/host_buffers.h"
#include "server/engine/scheduler.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_store.h"
#include "server/engine/variant_selector.h"

namespace gpucompute::server {

// When a request stops being wanted.
struct RequestLifetime {
  absl::Time deadline = absl::InfiniteFuture();
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  bool Stopped() const { return cancelled->load() || absl::Now() > deadline; }
};

// One validated compute request. The payload pieces and `out` stay owned by
// the caller until `done` runs.
struct ComputeCall {
  kernels::Problem problem;
  const kernels::Variant* variant = nullptr;  // null: the engine chooses ("auto")
  bool allow_reduced_precision = false;
  HostPieces a;
  HostPieces b;
  // Operands in clients' shared-memory regions, read in place of `a` / `b`
  // (see CallMemory).
  std::optional<RegionSlice> a_region;
  std::optional<RegionSlice> b_region;
  // Operands held by the server, read in place of `a` / `b` (null: inline).
  // The work runs on the device holding them.
  std::shared_ptr<Tensor> a_tensor;
  std::shared_ptr<Tensor> b_tensor;
  // The result goes into this region slice instead of back to the caller.
  std::optional<RegionSlice> out_region;
  // Reused buffers for returned results and operands read through a
  // region's file (null: fresh ones). Outlives the call.
  HostBufferPool* buffers = nullptr;
  // Keep the result on the device as a new tensor with this idle lifetime
  // (zero: the store's default) instead of returning its bytes.
  bool keep_output = false;
  absl::Duration keep_ttl;
  RequestLifetime lifetime;
};

struct ComputeOutcome {
  const kernels::Variant* variant = nullptr;  // what ran, or was chosen
  const Device* device = nullptr;             // null when none was chosen
  int64_t queue_us = 0;
  StageTimes times;
  std::optional<TensorInfo> kept;  // the result's tensor, when kept
  int batch_size = 1;              // requests that ran together, this one included
  // The result's bytes, when they go back to the caller (neither kept nor
  // written into a region): the caller's to answer with, then to hand back
  // to ComputeCall::buffers.
  std::unique_ptr<std::string> result;
};

struct ProfileCall {
  ProfileJob job;
  RequestLifetime lifetime;
};

struct ProfileOutcome {
  std::vector<VariantMeasurement> measured;
  const Device* device = nullptr;
  int64_t queue_us = 0;
  const kernels::Variant* selected = nullptr;  // what "auto" now picks for the shape
  bool flush_cache = false;                    // each timed run started with a cold cache
};

// Requests batched at most this large (inputs and result): larger ones spend
// their time moving bytes, which a batch does not save.
inline constexpr int64_t kMaxBatchedRequestBytes = int64_t{1} << 20;
// Requests this small (inputs and result, sent, returned or held as
// tensors) run on the thread that submits them when their device has a
// worker free and nothing waits: a hand-off to a worker thread and back
// costs more than their work. One that keeps its result does so only when
// the result's memory could be had at once: a wait for memory belongs on a
// worker, not on a gRPC thread.
inline constexpr int64_t kInlineRequestBytes = int64_t{64} << 10;

// Timed repetitions of each candidate when a request calibrates its bucket.
// Kernels of a request of at most kInlineRequestBytes take a few
// microseconds and differ by fractions of one: a median of 3 ranked 64^3
// MatMuls `tiled16` at one server start and `tiled32` at the next, so such
// requests time each candidate 15 times (about 8 kernels of 5 us: under a
// millisecond, once per bucket). Larger ones keep 3.
int CalibrationRepetitions(const kernels::Problem& p);

// What a batchable request's batch mates share (BatchPart::key): the
// variant and the problem (a WorkKey), and whether everything is on the
// device. Built for every batchable request, whether or not it ever queues;
// written out as text it cost a 1x1 Transpose on the CPU backend 0.9 us of
// its 6.2 us on the server.
std::string BatchKey(const kernels::Problem& p, const kernels::Variant* variant, bool on_device);

struct ComputeEngineOptions {
  // Small requests (kInlineRequestBytes) whose matrices all travel in the
  // call (no tensor, no shared-memory region, no kept result) get `auto`
  // choices of their own (ServedFrom::kHostMemory): a new bucket's
  // calibration times its candidates as such a request is served
  // (ProfileJob::time_as_served_from_host) instead of kernels alone.
  // Requests on tensors keep the kernels-alone choices Profile also records.
  bool calibrate_as_served = false;
};

class ComputeEngine {
 public:
  // All four must outlive the engine; without `tensors`, calls that name
  // or keep a tensor get FAILED_PRECONDITION.
  ComputeEngine(const kernels::Registry& registry, Scheduler& scheduler, VariantSelector& selector,
                kernels::Backend backend, TensorStore* tensors = nullptr,
                ComputeEngineOptions options = ComputeEngineOptions());

  kernels::Backend backend() const { return backend_; }
  const kernels::Registry& registry() const { return registry_; }
  const std::vector<std::unique_ptr<Device>>& devices() const { return scheduler_.devices(); }
  TensorStore* tensors() const { return tensors_; }
  const BatchingOptions& batching() const { return scheduler_.batching(); }

  // The variant a request names for `p` (null: "auto"), or why it cannot
  // run it: VariantSelector::Requested, the one place that decides.
  absl::StatusOr<const kernels::Variant*> RequestedVariant(
      const kernels::Problem& p, std::string_view name,
      VariantSelector::DTypeNamer* dtype_name) const {
    return selector_.Requested(p, name, dtype_name);
  }

  // Runs `call`; `done` is called exactly once, on a device worker or on the
  // calling thread (work refused, or small work run there).
  void Compute(ComputeCall call, std::function<void(absl::Status, ComputeOutcome&)> done);

  // Measures the job's variants (all that apply when it lists none) and
  // remembers the fastest for "auto".
  void Profile(ProfileCall call, std::function<void(absl::Status, const ProfileOutcome&)> done);

 private:
  // How the call runs in a batch, when it can: a small problem, a variant
  // already known, and either host inputs and result (sent in the call, or
  // shared-memory slices copied through the region's file) or tensors of
  // one device read and the result kept there in `kept`, a tensor made
  // ahead. `by_dma`: a slice is reached in its pinned pages, which a batch
  // does not gather; such a call never batches. Nor does one that finds
  // `device` (any, if null) idle: it runs alone.
  std::optional<BatchPart> BatchPartOf(const std::shared_ptr<ComputeCall>& call,
                                       const kernels::Variant* variant,
                                       const std::shared_ptr<CallMemory>& memory,
                                       const std::shared_ptr<ComputeOutcome>& outcome,
                                       const std::shared_ptr<std::shared_ptr<Tensor>>& kept,
                                       bool by_dma, const Device* device) const;
  // Once the call's work ran: its tensors count as used, and its kept
  // result is listed (taken from `kept`) unless the caller has gone.
  void Settle(const ComputeCall& c, std::shared_ptr<Tensor>& kept, ComputeOutcome& outcome) const;

  const kernels::Registry& registry_;
  Scheduler& scheduler_;
  VariantSelector& selector_;
  const kernels::Backend backend_;
  TensorStore* const tensors_;
  const ComputeEngineOptions options_;
};

}  // namespace gpucompute::server
