// A compute device as the scheduler sees it: the CPU, or one GPU. Devices run
// jobs synchronously on the scheduler's worker threads for that device.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gpucompute/kernels/variant.h"
#include "server/engine/hardware_counters.h"

namespace gpucompute::server {

struct DeviceDescription {
  std::string name;  // "cuda:0 NVIDIA H200" or "cpu"
  int64_t memory_bytes = 0;
  int32_t multiprocessors = 0;
  kernels::Backend backend = kernels::Backend::kCpu;
  // A GPU's PCI address ("00000000:3B:00.0"), where NVML finds the same
  // device whatever CUDA_VISIBLE_DEVICES renumbered; empty for the CPU.
  std::string pci_bus_id;
};

// Ceilings measured on the device at start-up, used for roofline fractions.
struct Ceilings {
  double gbytes_per_s = 0;  // copy bandwidth, bytes read + written
  double gflops = 0;        // FP32 arithmetic (cuBLAS SGEMM without TF32 on a GPU)
  double gflops_fp64 = 0;   // FP64 arithmetic (0: same as gflops)
  double gflops_tf32 = 0;   // TF32 tensor cores, for reduced-precision variants (0: none)
  // 16-bit tensor cores (cuBLAS BF16 GEMM, FP32 accumulate): the roofline of
  // FP16 and BF16 problems, whichever variant runs them (0: same as gflops).
  double gflops_half = 0;
  // Read-only bandwidth, bytes read (0: not measured). Ops that only read
  // (reduce) are held to it when it is set, else to the copy bandwidth.
  double gbytes_per_s_read = 0;
  // The last-level cache, bytes (0: unknown). A problem that fits in it may
  // run above the bandwidth ceilings, which are measured beyond it.
  int64_t cache_bytes = 0;
  double GFlopsFor(kernels::DType dtype, bool reduced_precision = false) const {
    if (reduced_precision && gflops_tf32 > 0) return gflops_tf32;
    switch (dtype) {
      case kernels::DType::kFloat32: return gflops;
      case kernels::DType::kFloat64: return gflops_fp64 > 0 ? gflops_fp64 : gflops;
      case kernels::DType::kFloat16:
      case kernels::DType::kBFloat16: return gflops_half > 0 ? gflops_half : gflops;
    }
    return gflops;  // not reached: every case returns
  }
};

// Memory and health counters a device exposes to operators.
struct DeviceCounters {
  bool healthy = true;
  int64_t pool_reserved_bytes = 0;
  int64_t pool_used_bytes = 0;
  int64_t device_malloc_calls = 0;
  int64_t pool_growths = 0;
  int64_t host_alloc_calls = 0;
  // CUDA graphs of small requests and of small batches: captured (and
  // launched once), and launched again from the cache.
  int64_t request_graph_captures = 0;
  int64_t request_graph_replays = 0;
  int64_t batch_graph_captures = 0;
  int64_t batch_graph_replays = 0;
};

// A payload in host memory as it arrived: one or more pieces, in order
// (gRPC hands a large message over in several slices).
using HostPieces = std::vector<absl::Span<const char>>;

// Memory holding a tensor on one device: device memory on a GPU (taken from
// the same budget as requests' buffers), host memory on the CPU. It frees
// itself, and returns its bytes to the budget, when destroyed.
class ResidentMemory {
 public:
  virtual ~ResidentMemory() = default;
  // A device pointer on a GPU, a host pointer on the CPU.
  virtual void* data() const = 0;
  virtual int64_t bytes() const = 0;
};

// One request's operands, owned by the caller until the job returns. Each
// operand is either in host memory (`a`, `b`: the pieces as received) or
// already resident on the device (`a_resident`, `b_resident`: a tensor's
// memory, read in place, no upload). The result goes to host memory `out`
// or, when `out_resident` is set, stays on the device (no download). `b` is
// empty and `b_resident` null for one-input ops.
struct ComputeJob {
  kernels::Problem problem;
  const kernels::Variant* variant = nullptr;
  HostPieces a;
  HostPieces b;
  void* out = nullptr;
  // Host memory registered for DMA (a pinned shared-memory region): the
  // device copies straight from `a` / `b` or into `out`, with no staging
  // and no CPU access to those pages. Each pinned `a` / `b` is one piece.
  bool a_pinned = false;
  bool b_pinned = false;
  bool out_pinned = false;
  const ResidentMemory* a_resident = nullptr;
  const ResidentMemory* b_resident = nullptr;
  ResidentMemory* out_resident = nullptr;
};

struct StageTimes {
  int64_t upload_us = 0;
  int64_t compute_us = 0;
  int64_t download_us = 0;
  // Anything the report should say about where the bytes came from, e.g.
  // "b copied from cuda:1" for a tensor on another GPU; empty otherwise.
  std::string note;
};

// Profile: every listed variant on device-side random data.
struct ProfileJob {
  kernels::Problem problem;
  std::vector<const kernels::Variant*> variants;
  int warmup = 0;
  int repetitions = 0;
  uint64_t seed = 0;
  // Flush the last-level cache (a GPU's L2) before each timed run, untimed,
  // so that every run reads its operands from memory.
  bool flush_cache = true;
  // After every variant is timed, replay each correct one under the
  // device's hardware-counter profiler (never during the timed runs).
  bool read_counters = false;
  // Time each variant the way a small request with its inputs and result
  // in host memory is served, where the device serves such requests apart
  // (CUDA: a variant that reads and writes pinned host memory does so, any
  // other pays its copies up and down), instead of the kernel alone on
  // device memory. How much a kernel reads is free on device memory and
  // costs a bus transfer from host memory.
  bool time_as_served_from_host = false;
};

struct VariantMeasurement {
  const kernels::Variant* variant = nullptr;
  bool ok = false;
  std::string error;
  double max_rel_error = 0;
  std::vector<double> times_us;  // one per repetition, when ok
  // Timed as served (ProfileJob::time_as_served_from_host, where the device
  // serves such requests apart): the times hold the copies, if any.
  bool timed_as_served = false;
  // With ProfileJob::read_counters: what the profiler read, and why some or
  // all counters are missing (empty when none are).
  std::vector<CounterValue> counters;
  std::string counters_note;
};

// Returns true when the caller no longer wants the result.
using StopRequested = std::function<bool()>;

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceDescription& description() const = 0;
  virtual const Ceilings& ceilings() const = 0;
  // Replaces the ceilings measured at start-up (--ceilings); before serving.
  virtual absl::Status SetCeilings(const Ceilings& ceilings);
  // How many jobs this device runs at once (the scheduler's worker count).
  virtual int concurrency() const = 0;
  virtual DeviceCounters counters() const { return {}; }
  // False once a fatal error took the device out of service. Read on every
  // admission: an atomic load, never a driver call.
  virtual bool healthy() const { return true; }
  // Runs one request; `stop` is polled between stages so abandoned work
  // returns its buffers early.
  virtual absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested& stop) = 0;
  // Runs jobs of one op, dtype, shape and variant, all with host inputs and
  // results, as one batch. One result per job, in order, and each job's own:
  // a job that fails does not fail the others. `stops[i]` is job i's. The
  // default runs them one after another; a GPU moves them in one copy each
  // way and waits once.
  virtual std::vector<absl::StatusOr<StageTimes>> ExecuteBatch(
      absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops);
  virtual absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                                  const StopRequested& stop) = 0;

  // Tensors. The memory a device lends them at most (its request budget on
  // a GPU); the tensor budget defaults to half of it.
  virtual int64_t memory_budget_bytes() const { return description().memory_bytes; }
  // `bytes` of resident memory for a tensor, waiting until `deadline` for
  // them to fit the device's budget; RESOURCE_EXHAUSTED when they do not.
  virtual absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int64_t bytes,
                                                                           absl::Time deadline);
  // Copies `src` (host pieces, in order) to `dst` at byte `offset`; returns
  // once the bytes are on the device and `src` may be reused. A GPU moves
  // them through pinned staging, chunk by chunk, or, when `src_pinned`
  // (registered memory, see PinHostMemory), by DMA straight from them.
  virtual absl::Status WriteResident(ResidentMemory& dst, int64_t offset, const HostPieces& src,
                                     bool src_pinned = false);
  // Copies `bytes` of `src` from byte `offset` to host memory `dst`, by DMA
  // straight into it when `dst_pinned`.
  virtual absl::Status ReadResident(const ResidentMemory& src, int64_t offset, int64_t bytes,
                                    void* dst, bool dst_pinned = false);

  // Registers host memory for DMA on every device (a GPU's portable
  // registration): true when pinned, false when this device does not pin
  // (the CPU reads host memory where it is). UnpinHostMemory undoes it.
  virtual absl::StatusOr<bool> PinHostMemory(void* data, int64_t bytes);
  virtual void UnpinHostMemory(void* data);
};

inline absl::Status Device::SetCeilings(const Ceilings&) {
  return absl::UnimplementedError(description().name + " keeps the ceilings it measured");
}
inline std::vector<absl::StatusOr<StageTimes>> Device::ExecuteBatch(
    absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops) {
  std::vector<absl::StatusOr<StageTimes>> results;
  results.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (stops[i]()) {
      results.push_back(absl::CancelledError("request abandoned before its part of the batch ran"));
    } else {
      results.push_back(Execute(jobs[i], stops[i]));
    }
  }
  return results;
}
inline absl::StatusOr<std::unique_ptr<ResidentMemory>> Device::AllocateResident(int64_t,
                                                                                absl::Time) {
  return absl::UnimplementedError(description().name + " cannot hold tensors");
}
inline absl::Status Device::WriteResident(ResidentMemory&, int64_t, const HostPieces&, bool) {
  return absl::UnimplementedError(description().name + " cannot hold tensors");
}
inline absl::Status Device::ReadResident(const ResidentMemory&, int64_t, int64_t, void*, bool) {
  return absl::UnimplementedError(description().name + " cannot hold tensors");
}
inline absl::StatusOr<bool> Device::PinHostMemory(void*, int64_t) { return false; }
inline void Device::UnpinHostMemory(void*) {}

}  // namespace gpucompute::server
