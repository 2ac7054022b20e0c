// The device flags and the backend they open (backend_flags.h).
#include "server/backend_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpucompute/common/flag_checks.h"
#include "server/cpu/cpu_device.h"
#include "server/cuda/open_devices.h"
#include "server/ops/log.h"

ABSL_FLAG(std::string, backend, "auto", "auto (CUDA when a GPU is usable, else CPU), cuda, or cpu");
ABSL_FLAG(int32_t, cpu_workers, 0,
          "CPU backend: requests run at once, 0 to 4096 (0: one per core)");
ABSL_FLAG(std::string, devices, "all", "CUDA backend: GPUs to use, \"all\" or a list like 0,1");
ABSL_FLAG(int32_t, streams_per_device, 8,
          "CUDA backend: requests each GPU runs at once; 8 lets each of the threads gRPC runs "
          "calls on (half the cores, 8 on a 16-core host) run its own small request (1 to 256)");
ABSL_FLAG(int32_t, batch_graphs_per_stream, 64,
          "CUDA backend: CUDA graphs of small batches' kernels each stream keeps (one per "
          "variant, shape and batch size seen, least recently used dropped first), so a batch "
          "costs one graph launch; 0: launch each member's kernels one by one (0 to 4096)");
ABSL_FLAG(int32_t, batch_branches, 8,
          "CUDA backend: streams a small batch's graph fans its members out over, so that "
          "their kernels run side by side on the GPU instead of one after another (a 64^3 "
          "MatMul fills 16 of an H200's 132 SMs); variants with a batched form run every "
          "member as one kernel instead; 1: one after another (1 to 64)");
ABSL_FLAG(int32_t, request_graphs_per_stream, 64,
          "CUDA backend: CUDA graphs of small requests each stream keeps (one per variant, shape "
          "and buffers seen twice, least recently used dropped first), so that a repeated small "
          "request queues its copies, kernels and timing events in one graph launch; 0: one by "
          "one (0 to 4096)");
ABSL_FLAG(int64_t, tensor_block_cache_bytes, int64_t{256} << 20,
          "CUDA backend: device memory of freed tensors each GPU keeps for the next tensor of the "
          "same size, so that an op keeping its output allocates and frees without a CUDA call; "
          "blocks over 1/64 of it fill at most half of it (so the default keeps a 4096x4096 "
          "float32 result), and it stays under 1/64 of the pool cap. 0: every tensor is "
          "allocated from the pool and freed to it (0 or more)");
ABSL_FLAG(int64_t, zero_copy_bytes, int64_t{64} << 10,
          "CUDA backend: a small request whose inputs and result together are at most this many "
          "bytes runs without copies when its variant uses plain loads and stores (the "
          "project's own kernels, not cuBLAS or CUB): the kernel reads the inputs from pinned "
          "host memory and writes the result there. 0: always copy (up to 1048576)");
ABSL_FLAG(double, device_memory_fraction, 0.9,
          "CUDA backend: cap of pooled device memory, as a fraction of each GPU's memory "
          "(above 0, at most 1)");
ABSL_FLAG(bool, profile_counters, true,
          "CUDA backend: read hardware counters (CUPTI's range profiler) when a Profile asks; "
          "false: its rows say counters are turned off here");
ABSL_FLAG(std::string, cupti_library, "libcupti.so.13",
          "CUDA backend: the CUPTI library Profile's counters open (a name on the library path, "
          "or a path)");
ABSL_FLAG(int32_t, profile_counter_max_passes, 32,
          "CUDA backend: replays of one variant the counters may take (the profiler reads a few "
          "counters per pass) (1 to 1024)");

ABSL_FLAG(std::string, cuda_host_wait, "auto",
          "CUDA backend: how a thread waits for its GPU work: auto (CUDA's choice: spin while "
          "the host has more cores than GPU contexts), spin, yield (spin, but give the core to "
          "any thread ready to run) or block (sleep until the GPU's interrupt: no core spins, "
          "each wait wakes later)");

namespace gpucompute::server {
namespace {

// Bounds of the device flags.
constexpr int32_t kMaxCpuWorkers = 4096;
constexpr int32_t kMaxStreamsPerDevice = 256;
constexpr int32_t kMaxGraphsPerStream = 4096;
constexpr int32_t kMaxBatchBranches = 64;
constexpr int64_t kMaxZeroCopyBytes = int64_t{1} << 20;
constexpr int32_t kMaxCounterPasses = 1024;

// --devices: "all", or one or more GPU indices, comma-separated. Whether
// each index exists is known once the GPUs are counted (open_devices.cc).
absl::Status CheckDeviceList(const std::string& devices) {
  if (devices == "all") return absl::OkStatus();
  int listed = 0;
  for (absl::string_view part : absl::StrSplit(devices, ',', absl::SkipEmpty())) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: \"", std::string(part),
                       "\" is not a GPU index (give \"all\" or a list "
                       "such as 0,1)"));
    }
    ++listed;
  }
  if (listed == 0) {
    return absl::InvalidArgumentError("--devices: empty; give \"all\" or a list such as 0,1");
  }
  return absl::OkStatus();
}

// --cuda_host_wait's value, by the names the flag takes.
absl::StatusOr<HostWait> HostWaitFromFlag(const std::string& name) {
  static constexpr std::pair<const char*, HostWait> kNames[] = {
      {"auto", HostWait::kAuto},
      {"spin", HostWait::kSpin},
      {"yield", HostWait::kYield},
      {"block", HostWait::kBlock},
  };
  for (const auto& [spelled, value] : kNames) {
    if (name == spelled) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--cuda_host_wait: must be auto, spin, yield or block, got \"", name, "\""));
}

// The CUDA backend's flags, each within its bounds. Checked whatever the
// backend, so that a flag file that starts a CPU server starts a GPU one.
absl::StatusOr<CudaDeviceOptions> CudaOptionsFromFlags() {
  CudaDeviceOptions options;
  options.devices = absl::GetFlag(FLAGS_devices);
  if (absl::Status s = CheckDeviceList(options.devices); !s.ok()) return s;
  options.streams_per_device = absl::GetFlag(FLAGS_streams_per_device);
  options.batch_graphs_per_stream = absl::GetFlag(FLAGS_batch_graphs_per_stream);
  options.batch_branches = absl::GetFlag(FLAGS_batch_branches);
  options.request_graphs_per_stream = absl::GetFlag(FLAGS_request_graphs_per_stream);
  options.profile_counter_max_passes = absl::GetFlag(FLAGS_profile_counter_max_passes);
  struct Bound {
    const char* flag;
    int64_t value, low, high;
  };
  for (const Bound& b : {
           Bound{"streams_per_device", options.streams_per_device, 1, kMaxStreamsPerDevice},
           Bound{"batch_graphs_per_stream", options.batch_graphs_per_stream, 0,
                 kMaxGraphsPerStream},
           Bound{"batch_branches", options.batch_branches, 1, kMaxBatchBranches},
           Bound{"request_graphs_per_stream", options.request_graphs_per_stream, 0,
                 kMaxGraphsPerStream},
           Bound{"profile_counter_max_passes", options.profile_counter_max_passes, 1,
                 kMaxCounterPasses},
       }) {
    if (absl::Status s = common::CheckFlagRange(b.flag, b.value, b.low, b.high); !s.ok()) return s;
  }
  options.tensor_block_cache_bytes = absl::GetFlag(FLAGS_tensor_block_cache_bytes);
  if (absl::Status s =
          common::CheckFlagAtLeast("tensor_block_cache_bytes", options.tensor_block_cache_bytes, 0);
      !s.ok()) {
    return s;
  }
  options.zero_copy_bytes = absl::GetFlag(FLAGS_zero_copy_bytes);
  if (absl::Status s =
          common::CheckFlagRange("zero_copy_bytes", options.zero_copy_bytes, 0, kMaxZeroCopyBytes);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<HostWait> host_wait = HostWaitFromFlag(absl::GetFlag(FLAGS_cuda_host_wait));
  if (!host_wait.ok()) return host_wait.status();
  options.host_wait = *host_wait;
  options.device_memory_fraction = absl::GetFlag(FLAGS_device_memory_fraction);
  if (!(options.device_memory_fraction > 0 && options.device_memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device_memory_fraction: must be above 0 and at most 1, got ",
                     options.device_memory_fraction));
  }
  options.profile_counters = absl::GetFlag(FLAGS_profile_counters);
  options.cupti_library = absl::GetFlag(FLAGS_cupti_library);
  return options;
}

}  // namespace

absl::Status CheckBackendFlags() {
  const std::string choice = absl::GetFlag(FLAGS_backend);
  if (choice != "auto" && choice != "cuda" && choice != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: must be auto, cuda or cpu, got \"", choice, "\""));
  }
  if (absl::Status s = common::CheckFlagRange("cpu_workers", absl::GetFlag(FLAGS_cpu_workers), 0,
                                              kMaxCpuWorkers);
      !s.ok()) {
    return s;
  }
  return CudaOptionsFromFlags().status();
}

absl::StatusOr<Backend> OpenBackendFromFlags(const Ceilings& cpu_given) {
  if (absl::Status s = CheckBackendFlags(); !s.ok()) return s;
  const std::string choice = absl::GetFlag(FLAGS_backend);
  Backend backend;
  if (choice != "cpu") {
    auto options = CudaOptionsFromFlags();
    if (!options.ok()) return options.status();
    auto gpus = OpenCudaDevices(*options);
    if (gpus.ok()) {
      backend.kind = kernels::Backend::kCuda;
      backend.devices = std::move(*gpus);
      LogInfo(absl::StrCat("backend cuda: ", backend.devices.size(), " GPU(s)"));
      return backend;
    }
    if (choice == "cuda") return gpus.status();
    LogInfo(absl::StrCat("backend cpu: ", gpus.status().message()));
  } else {
    LogInfo("backend cpu: chosen by --backend=cpu");
  }
  backend.devices.push_back(MakeCpuDevice(absl::GetFlag(FLAGS_cpu_workers), cpu_given));
  return backend;
}

}  // namespace gpucompute::server
