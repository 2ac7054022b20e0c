// A compute device as the scheduler sees it: the CPU, or one GPU. Devices run
// jobs synchronously on the scheduler's worker threads for that device.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::server {

struct DeviceDescription {
  std::string name;  // "cuda:0 NVIDIA H200" or "cpu"
  int64_t memory_bytes = 0;
  int32_t multiprocessors = 0;
  kernels::Backend backend = kernels::Backend::kCpu;
};

// Ceilings measured on the device at start-up, used for roofline fractions.
struct Ceilings {
  double gbytes_per_s = 0;  // copy bandwidth, bytes read + written
  double gflops = 0;        // FP32 arithmetic (cuBLAS SGEMM without TF32 on a GPU)
  double gflops_fp64 = 0;   // FP64 arithmetic (0: same as gflops)
  double gflops_tf32 = 0;   // TF32 tensor cores, for reduced-precision variants (0: none)
  double GFlopsFor(kernels::DType dtype, bool reduced_precision = false) const {
    if (reduced_precision && gflops_tf32 > 0) return gflops_tf32;
    return dtype == kernels::DType::kFloat64 && gflops_fp64 > 0 ? gflops_fp64 : gflops;
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
};

// A payload in host memory as it arrived: one or more pieces, in order
// (gRPC hands a large message over in several slices).
using HostPieces = std::vector<absl::Span<const char>>;

// One request's operands in host memory, owned by the caller until the
// job returns. `b` is empty for one-input ops; `out` holds the full result.
struct ComputeJob {
  kernels::Problem problem;
  const kernels::Variant* variant = nullptr;
  HostPieces a;
  HostPieces b;
  void* out = nullptr;
};

struct StageTimes {
  int64_t upload_us = 0;
  int64_t compute_us = 0;
  int64_t download_us = 0;
};

// Profile: every listed variant on device-side random data.
struct ProfileJob {
  kernels::Problem problem;
  std::vector<const kernels::Variant*> variants;
  int warmup = 0;
  int repetitions = 0;
  uint64_t seed = 0;
};

struct VariantMeasurement {
  const kernels::Variant* variant = nullptr;
  bool ok = false;
  std::string error;
  double max_rel_error = 0;
  std::vector<double> times_us;  // one per repetition, when ok
};

// Returns true when the caller no longer wants the result.
using StopRequested = std::function<bool()>;

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceDescription& description() const = 0;
  virtual const Ceilings& ceilings() const = 0;
  // How many jobs this device runs at once (the scheduler's worker count).
  virtual int concurrency() const = 0;
  virtual DeviceCounters counters() const { return {}; }
  // False once a fatal error took the device out of service. Read on every
  // admission: an atomic load, never a driver call.
  virtual bool healthy() const { return true; }
  // Runs one request; `stop` is polled between stages so abandoned work
  // returns its buffers early.
  virtual absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested& stop) = 0;
  virtual absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                                  const StopRequested& stop) = 0;
};

}  // namespace gpucompute::server
