#include "server/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/ceilings.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/health.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/profile_runner.h"
#include "server/cuda/slot.h"
#include "server/cuda/slot_pool.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

namespace {

using Clock = std::chrono::steady_clock;
using Mark = Slot::Mark;

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

// Byte sizes of one request's device buffers.
struct RequestBytes {
  int64_t a = 0, b = 0, out = 0, workspace = 0;
  int64_t Total() const { return AlignedBytes(a) + AlignedBytes(b) + AlignedBytes(out) + AlignedBytes(workspace); }
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, int slots, DeviceDescription description)
      : ordinal_(ordinal), slot_count_(slots), description_(std::move(description)), health_(description_.name) {}

  // Frees the slots and the pool with this device current.
  ~CudaDevice() override { cudaSetDevice(ordinal_); }

  // The pool, the slots and the ceilings, on the current device (this one).
  absl::Status Init(const CudaDeviceOptions& options) {
    size_t free_bytes = 0, total_bytes = 0;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const int64_t cap = std::min<int64_t>(int64_t(options.device_memory_fraction * double(total_bytes)),
                                          int64_t(free_bytes) - (int64_t{512} << 20));
    if (cap <= 0) {
      return absl::ResourceExhaustedError(absl::StrCat(description_.name, ": only ", free_bytes,
                                                       " bytes free, too little to serve"));
    }
    auto memory = DeviceMemory::Create(ordinal_, cap);
    if (!memory.ok()) return memory.status();
    memory_ = std::move(*memory);

    std::vector<std::unique_ptr<Slot>> slots;
    for (int i = 0; i < slot_count_; ++i) {
      auto slot = Slot::Create(device_malloc_calls_, host_alloc_calls_);
      if (!slot.ok()) return slot.status();
      slots.push_back(std::move(*slot));
    }
    slots_ = std::make_unique<SlotPool>(std::move(slots));

    auto ceilings = MeasureCeilings(slots_->first(), device_malloc_calls_);
    if (!ceilings.ok()) return ceilings.status();
    ceilings_ = *ceilings;
    return absl::OkStatus();
  }

  const DeviceDescription& description() const override { return description_; }
  const Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return slot_count_; }
  bool healthy() const override { return health_.healthy(); }

  DeviceCounters counters() const override {
    DeviceCounters c;
    c.healthy = health_.healthy();
    c.pool_reserved_bytes = memory_->pool_reserved_bytes();
    c.pool_used_bytes = memory_->pool_used_bytes();
    c.pool_growths = memory_->pool_growths();
    c.device_malloc_calls = device_malloc_calls_.load();
    c.host_alloc_calls = host_alloc_calls_.load();
    return c;
  }

  absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) return health_.TakeOutOfService("cudaSetDevice failed");
    SlotPool::Lease slot = slots_->Acquire();
    const kernels::Problem& p = job.problem;
    const int64_t es = kernels::ElementSize(p.dtype);
    RequestBytes bytes;
    bytes.a = kernels::InputAElements(p) * es;
    bytes.b = kernels::InputBElements(p) * es;
    bytes.out = kernels::OutputElements(p) * es;
    bytes.workspace = int64_t(job.variant->WorkspaceBytes(p));
    auto times = bytes.Total() <= Slot::kScratchBytes ? ExecuteSmall(job, stop, *slot, bytes)
                                                      : ExecuteLarge(job, stop, *slot, bytes);
    if (!times.ok()) return health_.AfterError(times.status());
    return times;
  }

  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job, const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) return health_.TakeOutOfService("cudaSetDevice failed");
    SlotPool::Lease slot = slots_->Acquire();
    auto results = RunProfile(job, stop, *slot, *memory_, copier_, health_);
    if (!results.ok()) return health_.AfterError(results.status());
    return results;
  }

 private:
  // A request that fits in the slot's scratch: the inputs go up in one copy
  // from one staging chunk, the result comes down into the other, and the
  // host waits once, after the download. Stage times come from events.
  absl::StatusOr<StageTimes> ExecuteSmall(const ComputeJob& job, const StopRequested& stop, Slot& slot,
                                          const RequestBytes& bytes) {
    StagingBuffers& staging = slot.staging();
    if (auto s = staging.WaitIdle(); !s.ok()) return s;
    char* up = staging.chunk(0);
    char* down = staging.chunk(1);
    char* dev = slot.scratch();
    const size_t b_at = AlignedBytes(bytes.a), out_at = b_at + AlignedBytes(bytes.b);
    const size_t ws_at = out_at + AlignedBytes(bytes.out);
    copier_.Gather(up, job.a);  // under 1 MiB: on this thread
    copier_.Gather(up + b_at, job.b);
    const size_t up_bytes = bytes.b ? b_at + size_t(bytes.b) : size_t(bytes.a);
    if (auto s = slot.Record(Mark::kUploadBegin); !s.ok()) return s;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(dev, up, up_bytes, cudaMemcpyHostToDevice, slot.stream()),
                                    "upload cudaMemcpyAsync");
    if (auto s = slot.Record(Mark::kKernelStart); !s.ok()) return s;
    if (stop()) {
      // The staging chunk must not be refilled while the copy reads it.
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(slot.stream()), "upload wait");
      return absl::CancelledError("request abandoned before its kernel ran");
    }
    const kernels::Buffers buffers{dev, bytes.b ? dev + b_at : nullptr, dev + out_at,
                                   bytes.workspace ? dev + ws_at : nullptr, size_t(bytes.workspace)};
    if (auto s = job.variant->launch(job.problem, buffers, slot.launch_context()); !s.ok()) {
      cudaStreamSynchronize(slot.stream());
      return s;
    }
    if (auto s = slot.Record(Mark::kKernelEnd); !s.ok()) return s;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(down, dev + out_at, size_t(bytes.out), cudaMemcpyDeviceToHost, slot.stream()),
        "download cudaMemcpyAsync");
    if (auto s = slot.Record(Mark::kDownloaded); !s.ok()) return s;
    if (auto s = slot.WaitFor(Mark::kDownloaded, "download wait"); !s.ok()) return s;
    std::memcpy(job.out, down, size_t(bytes.out));

    auto upload_us = slot.MicrosBetween(Mark::kUploadBegin, Mark::kKernelStart);
    auto compute_us = slot.MicrosBetween(Mark::kKernelStart, Mark::kKernelEnd);
    auto download_us = slot.MicrosBetween(Mark::kKernelEnd, Mark::kDownloaded);
    for (const auto* t : {&upload_us, &compute_us, &download_us}) {
      if (!t->ok()) return t->status();
    }
    return StageTimes{*upload_us, *compute_us, *download_us};
  }

  // A larger request: its bytes are reserved from the budget and its buffers
  // taken from the pool; the operands go up through the pinned staging, the
  // result comes down through it after the kernel is waited for.
  absl::StatusOr<StageTimes> ExecuteLarge(const ComputeJob& job, const StopRequested& stop, Slot& slot,
                                          const RequestBytes& bytes) {
    auto reservation = memory_->Reserve(bytes.Total(), absl::Now() + kMaxMemoryWait);
    if (!reservation.ok()) return reservation.status();
    if (stop()) return absl::CancelledError("request abandoned while waiting for device memory");

    RequestMemory memory(std::move(*reservation), slot.stream());
    auto a = memory.Get(bytes.a);
    auto b = bytes.b ? memory.Get(bytes.b) : absl::StatusOr<void*>(nullptr);
    auto out = memory.Get(bytes.out);
    auto ws = bytes.workspace ? memory.Get(bytes.workspace) : absl::StatusOr<void*>(nullptr);
    for (const auto* r : {&a, &b, &out, &ws}) {
      if (!r->ok()) return r->status();
    }
    // The stream is idle here, so the upload begins as the first copy is
    // queued and the upload stage counts host gathering and DMA alike.
    if (auto s = slot.Record(Mark::kUploadBegin); !s.ok()) return s;
    if (auto s = slot.staging().Upload(*a, job.a, slot.stream(), copier_); !s.ok()) return s;
    if (bytes.b) {
      if (auto s = slot.staging().Upload(*b, job.b, slot.stream(), copier_); !s.ok()) return s;
    }
    if (stop()) return absl::CancelledError("request abandoned before its kernel ran");

    // The kernel follows the upload in stream order: no host wait between.
    if (auto s = slot.Record(Mark::kKernelStart); !s.ok()) return s;
    const kernels::Buffers buffers{*a, *b, *out, *ws, size_t(bytes.workspace)};
    if (auto s = job.variant->launch(job.problem, buffers, slot.launch_context()); !s.ok()) return s;
    if (auto s = slot.Record(Mark::kKernelEnd); !s.ok()) return s;
    // Waiting here keeps the kernel's time out of the download stage.
    if (auto s = slot.WaitFor(Mark::kKernelEnd, "kernel wait"); !s.ok()) return s;

    StageTimes times;
    const auto download_start = Clock::now();
    if (auto s = slot.staging().Download(job.out, *out, size_t(bytes.out), slot.stream(), copier_); !s.ok()) {
      return s;
    }
    times.download_us = MicrosSince(download_start);
    auto upload_us = slot.MicrosBetween(Mark::kUploadBegin, Mark::kKernelStart);
    if (!upload_us.ok()) return upload_us.status();
    auto compute_us = slot.MicrosBetween(Mark::kKernelStart, Mark::kKernelEnd);
    if (!compute_us.ok()) return compute_us.status();
    times.upload_us = *upload_us;
    times.compute_us = *compute_us;
    return times;
  }

  const int ordinal_;
  const int slot_count_;
  const DeviceDescription description_;
  DeviceHealth health_;
  HostCopyPool copier_{6};
  std::atomic<int64_t> device_malloc_calls_{0};
  std::atomic<int64_t> host_alloc_calls_{0};
  Ceilings ceilings_;
  // Declared after the memory: the slots go first, while the pool is there.
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<SlotPool> slots_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal, const CudaDeviceOptions& options) {
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaSetDevice(ordinal), "cudaSetDevice");
  cudaDeviceProp prop;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties");
  DeviceDescription description;
  description.name = absl::StrCat("cuda:", ordinal, " ", prop.name);
  description.memory_bytes = int64_t(prop.totalGlobalMem);
  description.multiprocessors = prop.multiProcessorCount;
  description.backend = kernels::Backend::kCuda;
  auto device = std::make_unique<CudaDevice>(ordinal, std::max(1, options.streams_per_device), std::move(description));
  if (auto s = device->Init(options); !s.ok()) return s;
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace gpucompute::server::cuda
