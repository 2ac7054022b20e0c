#include "server/cuda/profile_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/cuda_status.h"
#include "gpucompute/kernels/cuda_timer.h"
#include "gpucompute/kernels/reference.h"
#include "server/cuda/cupti_counters.h"
#include "server/cuda/fill.h"
#include "server/cuda/profile_counters.h"
#include "server/cuda/reference_gemm.h"
#include "server/cuda/request_plan.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

namespace {

// `repetitions` timed launches of `v` after `warmup` untimed ones, fewer when
// `stop` turns true; microseconds of each.
absl::StatusOr<std::vector<double>> TimeVariant(const kernels::Variant& v,
                                                const kernels::Problem& p,
                                                const kernels::Buffers& buffers, Slot& slot,
                                                int warmup, int repetitions,
                                                const StopRequested& stop, void* flush,
                                                int64_t flush_bytes) {
  const kernels::LaunchContext ctx = slot.launch_context();
  int round = 0;
  std::function<absl::Status()> flush_l2;
  if (flush != nullptr) {
    // A new byte each time, written over more than the L2 holds: the L2 is
    // left full of these lines, none of the variant's operands.
    flush_l2 = [&] {
      return CudaStatus(cudaMemsetAsync(flush, ++round & 0xff, size_t(flush_bytes), slot.stream()),
                        "L2 flush cudaMemsetAsync");
    };
  }
  auto ms = kernels::cuda::TimeLaunches(
      slot.timer(), slot.stream(), warmup, repetitions, [&] { return v.launch(p, buffers, ctx); },
      stop, flush_l2);
  if (!ms.ok()) return ms.status();
  std::vector<double> us;
  us.reserve(ms->size());
  for (double t : *ms) us.push_back(t * 1000.0);
  return us;
}

// `repetitions` runs of `served` (a small request whose matrices are in
// host memory) through `serve_small`, the path such requests take, after
// `warmup` untimed ones; fewer when `stop` turns true. The staging, the
// zero-copy rule and graph replay are the served request's own. Each run is
// timed on the host, from its first launch to the end of its wait, as a
// request's thread pays it: device events around a zero-copy kernel do not
// show all of its bus traffic (on an H200 host a 64^3 `tiled16` MatMul's
// events read 13 us against `tiled32`'s 11, and its requests took 55 us
// against 45 us of server time).
absl::StatusOr<std::vector<double>> TimeAsServed(const ServeSmall& serve_small,
                                                 const ComputeJob& served, int warmup,
                                                 int repetitions, const StopRequested& stop) {
  for (int i = 0; i < warmup; ++i) {
    if (auto t = serve_small(served); !t.ok()) return t.status();
  }
  std::vector<double> us;
  us.reserve(size_t(repetitions));
  for (int i = 0; i < repetitions && !(stop && stop()); ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (auto t = serve_small(served); !t.ok()) return t.status();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  return us;
}

// Bytes written to flush the current device's L2: twice its size (whatever
// the replacement policy keeps of the old lines, it is not the operands).
int64_t L2FlushBytes() {
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0) {
    cudaGetLastError();
    l2 = 64 << 20;  // unknown: larger than any current GPU's
  }
  return 2 * int64_t(l2);
}

}  // namespace

absl::StatusOr<std::vector<VariantMeasurement>> RunProfile(
    const ProfileJob& job, const StopRequested& stop, Slot& slot, DeviceMemory& memory,
    HostCopyPool& copier, DeviceHealth& health, const ServeSmall& serve_small) {
  const kernels::Problem& p = job.problem;
  const cudaStream_t stream = slot.stream();
  const int64_t es = kernels::ElementSize(p.dtype);
  const int64_t na = kernels::InputAElements(p), nb = kernels::InputBElements(p);
  const int64_t nout = kernels::OutputElements(p);
  int64_t ws_bytes = 0;
  for (const kernels::Variant* v : job.variants)
    ws_bytes = std::max<int64_t>(ws_bytes, v->WorkspaceBytes(p));
  const bool device_reference = p.op == kernels::Op::kMatMul &&
                                double(p.m) * double(p.n) * double(p.k) > kHostReferenceMaxMacs;
  const int64_t ref_bytes =
      device_reference ? AlignedBytes(8 * na) + AlignedBytes(8 * nb) + AlignedBytes(8 * nout) : 0;
  const int64_t flush_bytes = job.flush_cache ? L2FlushBytes() : 0;
  const int64_t total = AlignedBytes(na * es) + AlignedBytes(nb * es) +
                        AlignedBytes(kernels::OutputBytes(p)) + AlignedBytes(ws_bytes) + ref_bytes +
                        AlignedBytes(flush_bytes);
  auto reservation = memory.Reserve(total, absl::Now() + kMaxMemoryWait);
  if (!reservation.ok()) return reservation.status();

  RequestMemory buffers_memory(std::move(*reservation), stream);
  auto a = buffers_memory.Get(na * es);
  auto b = nb ? buffers_memory.Get(nb * es) : absl::StatusOr<void*>(nullptr);
  auto out = buffers_memory.Get(kernels::OutputBytes(p));
  auto ws = ws_bytes ? buffers_memory.Get(ws_bytes) : absl::StatusOr<void*>(nullptr);
  auto flush = flush_bytes ? buffers_memory.Get(flush_bytes) : absl::StatusOr<void*>(nullptr);
  for (const auto* r : {&a, &b, &out, &ws, &flush}) {
    if (!r->ok()) return r->status();
  }
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(FillUniform(p.dtype, *a, na, job.seed, stream), "fill a");
  if (nb)
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(FillUniform(p.dtype, *b, nb, job.seed + 1, stream), "fill b");

  // Inputs on the host for the check's scale and for host references.
  std::vector<char> host_a(na * es), host_b(nb * es), host_out(kernels::OutputBytes(p));
  if (auto s = slot.staging().Download(host_a.data(), *a, na * es, stream, copier); !s.ok())
    return s;
  if (nb) {
    if (auto s = slot.staging().Download(host_b.data(), *b, nb * es, stream, copier); !s.ok())
      return s;
  }
  std::vector<double> reference;
  if (device_reference) {
    auto ref = DeviceMatMulReference(p, *a, *b, buffers_memory, slot, copier);
    if (!ref.ok()) return ref.status();
    reference = std::move(*ref);
  } else {
    reference = kernels::ReferenceResult(p, host_a.data(), host_b.data());
  }

  const kernels::Buffers buffers{*a, *b, *out, *ws, size_t(ws_bytes)};
  const kernels::LaunchContext ctx = slot.launch_context();
  std::vector<VariantMeasurement> results;
  for (const kernels::Variant* v : job.variants) {
    if (stop()) return absl::CancelledError("profile abandoned: the client went away");
    VariantMeasurement m;
    m.variant = v;
    // All-ones bytes are NaN in every dtype.
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(*out, 0xff, kernels::OutputBytes(p), stream),
                                    "poison");
    absl::Status launched = v->launch(p, buffers, ctx);
    if (launched.ok())
      launched =
          slot.staging().Download(host_out.data(), *out, kernels::OutputBytes(p), stream, copier);
    if (!launched.ok()) {
      // The error fails this variant's row only, unless it broke the device:
      // then it ends the profile (and the caller's AfterError says why).
      health.AfterError(launched).IgnoreError();
      if (!health.healthy()) return launched;
      m.error = std::string(launched.message());
      results.push_back(std::move(m));
      continue;
    }
    const kernels::CheckResult check = kernels::CheckAgainstReference(
        p, v->reduced_precision, host_a.data(), host_out.data(), reference);
    m.ok = check.ok;
    m.error = check.message;
    m.max_rel_error = check.max_rel_error;
    if (m.ok) {
      // The request these inputs make when they travel in the call, timed
      // as served only when it is served as a small request.
      ComputeJob served;
      served.problem = p;
      served.variant = v;
      served.a = {absl::MakeConstSpan(host_a)};
      if (nb) served.b = {absl::MakeConstSpan(host_b)};
      served.out = host_out.data();
      const bool as_served = job.time_as_served_from_host && serve_small &&
                             ServedAsSmall(PlanOf(served, /*ordinal=*/0));
      // All-ones bytes again: what the check below reads is what serving wrote.
      if (as_served) std::memset(host_out.data(), 0xff, host_out.size());
      auto times = as_served ? TimeAsServed(serve_small, served, job.warmup, job.repetitions, stop)
                             : TimeVariant(*v, p, buffers, slot, job.warmup, job.repetitions, stop,
                                           *flush, flush_bytes);
      if (!times.ok()) return times.status();
      m.times_us = std::move(*times);
      m.timed_as_served = as_served;
      if (as_served) {
        const kernels::CheckResult served_check = kernels::CheckAgainstReference(
            p, v->reduced_precision, host_a.data(), host_out.data(), reference);
        if (!served_check.ok) {
          m.ok = false;
          m.error = "served from host memory: " + served_check.message;
        }
      }
    }
    results.push_back(std::move(m));
  }
  // Counters after every timed run: the profiler's replays and its state
  // never touch what was timed.
  if (job.read_counters) {
    if (auto s = ReadProfileCounters(CuptiCounters(), p, buffers, slot, *flush, flush_bytes, stop,
                                     results);
        !s.ok())
      return s;
  }
  return results;
}

}  // namespace gpucompute::server::cuda
