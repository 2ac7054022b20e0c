// The device flags and the backend they open (backend_flags.h).
#include "server/backend_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "server/cpu/cpu_device.h"
#include "server/cuda/open_devices.h"
#include "server/ops/log.h"

ABSL_FLAG(std::string, backend, "auto", "auto (CUDA when a GPU is usable, else CPU), cuda, or cpu");
ABSL_FLAG(int32_t, cpu_workers, 0, "CPU backend: requests run at once (0: one per core)");
ABSL_FLAG(std::string, devices, "all", "CUDA backend: GPUs to use, \"all\" or a list like 0,1");
ABSL_FLAG(int32_t, streams_per_device, 8,
          "CUDA backend: requests each GPU runs at once; 8 lets each of the threads gRPC runs "
          "calls on (half the cores, 8 on a 16-core host) run its own small request");
ABSL_FLAG(int32_t, batch_graphs_per_stream, 64,
          "CUDA backend: CUDA graphs of small batches' kernels each stream keeps (one per "
          "variant, shape and batch size seen, least recently used dropped first), so a batch "
          "costs one graph launch; 0: launch each member's kernels one by one (0 to 4096)");
ABSL_FLAG(int32_t, batch_branches, 8,
          "CUDA backend: streams a small batch's graph fans its members out over, so that "
          "their kernels run side by side on the GPU instead of one after another (a 64^3 "
          "MatMul fills 16 of an H200's 132 SMs); 1: one after another (1 to 64)");
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
          "allocated from the pool and freed to it");
ABSL_FLAG(int64_t, zero_copy_bytes, int64_t{64} << 10,
          "CUDA backend: a small request whose inputs and result together are at most this many "
          "bytes runs without copies when its variant uses plain loads and stores (the "
          "project's own kernels, not cuBLAS or CUB): the kernel reads the inputs from pinned "
          "host memory and writes the result there. 0: always copy (up to 1048576)");
ABSL_FLAG(double, device_memory_fraction, 0.9,
          "CUDA backend: cap of pooled device memory, as a fraction of each GPU's memory");
ABSL_FLAG(bool, profile_counters, true,
          "CUDA backend: read hardware counters (CUPTI's range profiler) when a Profile asks; "
          "false: its rows say counters are turned off here");
ABSL_FLAG(std::string, cupti_library, "libcupti.so.13",
          "CUDA backend: the CUPTI library Profile's counters open (a name on the library path, "
          "or a path)");
ABSL_FLAG(int32_t, profile_counter_max_passes, 32,
          "CUDA backend: replays of one variant the counters may take (the profiler reads a few "
          "counters per pass)");

namespace gpucompute::server {

absl::StatusOr<Backend> OpenBackendFromFlags() {
  const std::string choice = absl::GetFlag(FLAGS_backend);
  if (choice != "auto" && choice != "cuda" && choice != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend: must be auto, cuda or cpu, got \"", choice, "\""));
  }
  Backend backend;
  if (choice != "cpu") {
    CudaDeviceOptions options;
    options.devices = absl::GetFlag(FLAGS_devices);
    options.streams_per_device = absl::GetFlag(FLAGS_streams_per_device);
    options.batch_graphs_per_stream = absl::GetFlag(FLAGS_batch_graphs_per_stream);
    if (options.batch_graphs_per_stream < 0 || options.batch_graphs_per_stream > 4096) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch_graphs_per_stream: must be 0 to 4096, got ", options.batch_graphs_per_stream));
    }
    options.batch_branches = absl::GetFlag(FLAGS_batch_branches);
    if (options.batch_branches < 1 || options.batch_branches > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("--batch_branches: must be 1 to 64, got ", options.batch_branches));
    }
    options.request_graphs_per_stream = absl::GetFlag(FLAGS_request_graphs_per_stream);
    if (options.request_graphs_per_stream < 0 || options.request_graphs_per_stream > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat("--request_graphs_per_stream: must be 0 to 4096, got ",
                       options.request_graphs_per_stream));
    }
    options.tensor_block_cache_bytes = absl::GetFlag(FLAGS_tensor_block_cache_bytes);
    if (options.tensor_block_cache_bytes < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tensor_block_cache_bytes: must be 0 or more, got ", options.tensor_block_cache_bytes));
    }
    options.zero_copy_bytes = absl::GetFlag(FLAGS_zero_copy_bytes);
    if (options.zero_copy_bytes < 0 || options.zero_copy_bytes > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--zero_copy_bytes: must be 0 to 1048576, got ", options.zero_copy_bytes));
    }
    options.device_memory_fraction = absl::GetFlag(FLAGS_device_memory_fraction);
    options.profile_counters = absl::GetFlag(FLAGS_profile_counters);
    options.cupti_library = absl::GetFlag(FLAGS_cupti_library);
    options.profile_counter_max_passes = absl::GetFlag(FLAGS_profile_counter_max_passes);
    auto gpus = OpenCudaDevices(options);
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
  backend.devices.push_back(MakeCpuDevice(absl::GetFlag(FLAGS_cpu_workers)));
  return backend;
}

}  // namespace gpucompute::server
