#include "server/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gpucompute/common/time.h"
#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/ceilings.h"
#include "server/cuda/device_batch.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/health.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/profile_runner.h"
#include "server/cuda/request_plan.h"
#include "server/cuda/resident_memory.h"
#include "server/cuda/slot.h"
#include "server/cuda/slot_pool.h"
#include "server/cuda/small_batch.h"
#include "server/cuda/tensor_blocks.h"
#include "server/cuda/transfer_lanes.h"
#include "server/engine/work_key.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

namespace {

using Clock = std::chrono::steady_clock;
using Mark = Slot::Mark;

// Tensor uploads and downloads a GPU moves at once: two keep the copy engine
// busy while one lane's host side gathers or scatters its next chunk.
constexpr int kTransferLanes = 2;

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, int slots, DeviceDescription description)
      : ordinal_(ordinal),
        slot_count_(slots),
        description_(std::move(description)),
        health_(description_.name) {}

  // Frees the slots and the pool with this device current.
  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    // The kept tensor blocks are freed on the tensor stream, before it and
    // the pool go.
    tensor_blocks_.reset();
    if (tensor_stream_) cudaStreamSynchronize(tensor_stream_.get());
  }

  // The pool, the slots and the ceilings, on the current device (this one).
  absl::Status Init(const CudaDeviceOptions& options) {
    size_t free_bytes = 0, total_bytes = 0;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const int64_t cap =
        std::min<int64_t>(int64_t(options.device_memory_fraction * double(total_bytes)),
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
      SlotOptions slot_options;
      slot_options.batch_graphs = options.batch_graphs_per_stream;
      slot_options.request_graphs = options.request_graphs_per_stream;
      slot_options.batch_branches = options.batch_branches;
      slot_options.batch_counts = &batch_graph_counts_;
      slot_options.request_counts = &request_graph_counts_;
      auto slot = Slot::Create(device_malloc_calls_, host_alloc_calls_, slot_options);
      if (!slot.ok()) return slot.status();
      slots.push_back(std::move(*slot));
    }
    slots_ = std::make_unique<SlotPool>(std::move(slots));
    auto tensor_stream = CreateStream();
    if (!tensor_stream.ok()) return tensor_stream.status();
    tensor_stream_ = std::move(*tensor_stream);
    zero_copy_bytes_ = options.zero_copy_bytes;
    batch_branches_ = options.batch_branches;
    tensor_blocks_ = std::make_unique<TensorBlocks>(
        std::min(options.tensor_block_cache_bytes, cap / TensorBlocks::kBlocksPerCapacity),
        tensor_stream_.get());
    auto lanes = TransferLanes::Create(kTransferLanes, host_alloc_calls_);
    if (!lanes.ok()) return lanes.status();
    lanes_ = std::move(*lanes);

    auto ceilings = MeasureCeilings(slots_->first(), device_malloc_calls_);
    if (!ceilings.ok()) return ceilings.status();
    ceilings_ = *ceilings;
    return absl::OkStatus();
  }

  const DeviceDescription& description() const override { return description_; }
  const Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return slot_count_; }
  absl::Status SetCeilings(const Ceilings& ceilings) override {
    ceilings_ = ceilings;
    return absl::OkStatus();
  }
  bool healthy() const override { return health_.healthy(); }

  DeviceCounters counters() const override {
    DeviceCounters c;
    c.healthy = health_.healthy();
    c.pool_reserved_bytes = memory_->pool_reserved_bytes();
    c.pool_used_bytes = memory_->pool_used_bytes();
    c.pool_growths = memory_->pool_growths();
    c.device_malloc_calls = device_malloc_calls_.load();
    c.host_alloc_calls = host_alloc_calls_.load();
    c.request_graph_captures = request_graph_counts_.captured.load(std::memory_order_relaxed);
    c.request_graph_replays = request_graph_counts_.replayed.load(std::memory_order_relaxed);
    c.batch_graph_captures = batch_graph_counts_.captured.load(std::memory_order_relaxed);
    c.batch_graph_replays = batch_graph_counts_.replayed.load(std::memory_order_relaxed);
    return c;
  }

  absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    SlotPool::Lease slot = slots_->Acquire();
    const RequestPlan plan = PlanOf(job, ordinal_);
    auto times = ServedAsSmall(plan) ? ExecuteSmall(job, stop, *slot, plan)
                                     : ExecuteLarge(job, stop, *slot, plan);
    if (!times.ok()) return health_.AfterError(times.status());
    return times;
  }

  // Small jobs that fit one slot together go up in one copy, run a kernel
  // each (side by side, when replayed from a graph) and come down in one
  // copy, with one host wait; larger ones run one by one.
  std::vector<absl::StatusOr<StageTimes>> ExecuteBatch(
      absl::Span<const ComputeJob> jobs, absl::Span<const StopRequested> stops) override {
    if (jobs.size() < 2) return Device::ExecuteBatch(jobs, stops);
    const bool on_device = std::all_of(jobs.begin(), jobs.end(), [this](const ComputeJob& job) {
      return RunsOnDevice(job, ordinal_);
    });
    const int capacity = on_device ? 0 : SmallBatchCapacity(jobs.front(), batch_branches_);
    if (!on_device && capacity < 2) return Device::ExecuteBatch(jobs, stops);
    if (cudaSetDevice(ordinal_) != cudaSuccess) {
      const absl::Status s = health_.TakeOutOfService("cudaSetDevice failed");
      return std::vector<absl::StatusOr<StageTimes>>(jobs.size(), s);
    }
    SlotPool::Lease slot = slots_->Acquire();
    if (on_device) return ExecuteOnDeviceBatch(jobs, stops, *slot, health_);
    return ExecuteSmallBatches(jobs, stops, capacity, *slot, copier_, zero_copy_bytes_, health_);
  }

  int64_t memory_budget_bytes() const override { return memory_->limit_bytes(); }

  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int64_t bytes,
                                                                   absl::Time deadline) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    auto memory = CudaResidentMemory::Allocate(*memory_, *tensor_blocks_, ordinal_,
                                               tensor_stream_.get(), bytes, deadline);
    if (!memory.ok()) return health_.AfterError(memory.status());
    return std::unique_ptr<ResidentMemory>(std::move(*memory));
  }

  // Through a transfer lane's pinned staging, 8 MiB at a time; the bytes are
  // on the device when this returns.
  // A registered (pinned) source is copied by DMA straight from its pages.
  absl::Status WriteResident(ResidentMemory& dst, int64_t offset, const HostPieces& src,
                             bool src_pinned) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    TransferLanes::Lease lane = lanes_->Acquire();
    char* at = static_cast<char*>(dst.data()) + offset;
    if (src_pinned) {
      for (const auto& piece : src) {
        if (auto s = CudaStatus(cudaMemcpyAsync(at, piece.data(), piece.size(),
                                                cudaMemcpyHostToDevice, lane.stream()),
                                "pinned upload cudaMemcpyAsync");
            !s.ok()) {
          return health_.AfterError(s);
        }
        at += piece.size();
      }
      return health_.AfterError(
          CudaStatus(cudaStreamSynchronize(lane.stream()), "pinned upload wait"));
    }
    absl::Status s = lane.staging().Upload(at, src, lane.stream(), copier_);
    if (s.ok()) s = lane.staging().WaitIdle();
    return health_.AfterError(s);
  }

  absl::Status ReadResident(const ResidentMemory& src, int64_t offset, int64_t bytes, void* dst,
                            bool dst_pinned) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    TransferLanes::Lease lane = lanes_->Acquire();
    if (dst_pinned) {
      absl::Status s =
          CudaStatus(cudaMemcpyAsync(dst, static_cast<const char*>(src.data()) + offset,
                                     size_t(bytes), cudaMemcpyDeviceToHost, lane.stream()),
                     "pinned download cudaMemcpyAsync");
      if (s.ok()) s = CudaStatus(cudaStreamSynchronize(lane.stream()), "pinned download wait");
      return health_.AfterError(s);
    }
    return health_.AfterError(lane.staging().Download(
        dst, static_cast<const char*>(src.data()) + offset, size_t(bytes), lane.stream(), copier_));
  }

  // Portable: pinned for every device's context, not only this one's.
  absl::StatusOr<bool> PinHostMemory(void* data, int64_t bytes) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    const cudaError_t e = cudaHostRegister(data, size_t(bytes), cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it for the next call on this thread
      return CudaStatus(e, "cudaHostRegister");
    }
    return true;
  }

  void UnpinHostMemory(void* data) override {
    cudaSetDevice(ordinal_);
    if (cudaHostUnregister(data) != cudaSuccess) cudaGetLastError();
  }

  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                          const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess)
      return health_.TakeOutOfService("cudaSetDevice failed");
    SlotPool::Lease slot = slots_->Acquire();
    // A calibration timed as served runs what Execute runs for a small
    // request, on this slot.
    const ServeSmall serve_small = [&](const ComputeJob& served) {
      return ExecuteSmall(served, stop, *slot, PlanOf(served, ordinal_));
    };
    auto results = RunProfile(job, stop, *slot, *memory_, copier_, health_, serve_small);
    if (!results.ok()) return health_.AfterError(results.status());
    return results;
  }

 private:
  // A request whose own buffers fit in the slot's scratch: its host inputs
  // go up in one copy from one staging chunk, a returned result comes down
  // into the other, and the host waits once, at the end. Resident inputs
  // are read where they are and a kept result is written into its tensor.
  // Stage times come from events; a stage with no bytes to move is 0.
  absl::StatusOr<StageTimes> ExecuteSmall(const ComputeJob& job, const StopRequested& stop,
                                          Slot& slot, const RequestPlan& plan) {
    StagingBuffers& staging = slot.staging();
    if (auto s = staging.WaitIdle(); !s.ok()) return s;
    char* up = staging.chunk(0);
    char* down = staging.chunk(1);
    char* dev = slot.scratch();
    const size_t b_at = AlignedBytes(plan.a.buffer_bytes());
    const size_t out_at = b_at + AlignedBytes(plan.b.buffer_bytes());
    const size_t ws_at = out_at + AlignedBytes(plan.out_buffer());
    size_t up_bytes = 0;
    if (plan.a.source == Source::kHost) {
      copier_.Gather(up, *plan.a.host);  // under 1 MiB: on this thread
      up_bytes = size_t(plan.a.bytes);
    }
    if (plan.b.source == Source::kHost) {
      copier_.Gather(up + b_at, *plan.b.host);
      up_bytes = b_at + size_t(plan.b.bytes);
    }
    // Only the marks of the stages this request has are recorded: an event
    // record costs about as much host time as a kernel launch.
    // Zero-copy: a variant of plain loads and stores reads its host inputs
    // where they were gathered and writes its result into the staging it
    // would have been copied to. The copies, their marks and the GPU's
    // turnarounds between them go; the kernel reads across the bus instead.
    const bool zero_copy = job.variant->zero_copy && up_bytes + size_t(plan.out_buffer()) > 0 &&
                           int64_t(up_bytes) + plan.out_buffer() <= zero_copy_bytes_;
    const bool uploads = up_bytes > 0 && !zero_copy;
    const bool downloads = !plan.out_resident;
    const bool copies_down = downloads && !zero_copy;
    if (stop()) return absl::CancelledError("request abandoned before its kernel ran");
    // Host inputs sit at the same offsets in `up` as they would in `dev`.
    const char* host_inputs = zero_copy ? up : dev;
    const void* a = plan.a.source == Source::kResident ? plan.a.resident->data() : host_inputs;
    const void* b = plan.b.source == Source::kAbsent     ? nullptr
                    : plan.b.source == Source::kResident ? plan.b.resident->data()
                                                         : host_inputs + b_at;
    void* out = plan.out_resident ? job.out_resident->data() : zero_copy ? down : dev + out_at;
    void* workspace = plan.workspace == 0      ? nullptr
                      : plan.workspace_in_slot ? slot.workspace()
                                               : dev + ws_at;
    const kernels::Buffers buffers{a, b, out, workspace, size_t(plan.workspace)};
    // The request's stream work, from its first mark to its last.
    auto enqueue = [&](bool in_graph) {
      return slot.EnqueueStages(
          in_graph, uploads ? up_bytes : 0, dev + out_at, copies_down ? size_t(plan.out) : 0,
          [&] { return job.variant->launch(job.problem, buffers, slot.launch_context()); });
    };
    // Seen again, the same work (the same variant, shape and pointers) is
    // one graph launch: the copies, the kernels and the marks in one driver
    // call. The staging and scratch are the slot's, so only the tensors'
    // pointers vary. A kept result is a new tensor each time: its pointer
    // repeats only when its memory is reused, and on an H200 host capturing
    // at those repeats halved the rate of 64^3 MatMuls keeping their output
    // (39.5k/s to 20.7k/s at 64 in flight), so it is never graphed.
    // With replay off (no graphs kept), not even the key is built.
    const bool graphed = !plan.out_resident && slot.request_graphs().enabled() &&
                         slot.request_graphs().Launch(
                             WorkKey(job.variant, job.problem,
                                     {KeyWord(a), KeyWord(b), KeyWord(out), KeyWord(workspace),
                                      uploads ? int64_t(up_bytes) : 0, int64_t(copies_down)}),
                             slot.stream(), [&] { return enqueue(true); });
    if (!graphed) {
      if (auto s = enqueue(false); !s.ok()) {
        // Nothing may still read the staging when the next request fills it.
        cudaStreamSynchronize(slot.stream());
        return s;
      }
    }
    if (auto s = copies_down ? slot.WaitFor(Mark::kDownloaded, "download wait")
                             : slot.WaitFor(Mark::kKernelEnd, "kernel wait");
        !s.ok()) {
      return s;
    }
    if (downloads) std::memcpy(job.out, down, size_t(plan.out));
    auto times = slot.Stages(uploads, copies_down);
    if (!times.ok()) return times;
    if (zero_copy) times->note = "zero-copy: the kernel read and wrote host memory";
    if (graphed) {
      times->note =
          absl::StrCat(times->note, times->note.empty() ? "" : ", ", "replayed from a CUDA graph");
    }
    return times;
  }

  // A larger request: the bytes of its own buffers are reserved from the
  // budget and taken from the pool; host inputs go up through the pinned
  // staging, a tensor on another GPU is copied peer to peer, and a returned
  // result comes down through the staging after the kernel is waited for.
  absl::StatusOr<StageTimes> ExecuteLarge(const ComputeJob& job, const StopRequested& stop,
                                          Slot& slot, const RequestPlan& plan) {
    auto reservation = memory_->Reserve(plan.Total(), absl::Now() + kMaxMemoryWait);
    if (!reservation.ok()) return reservation.status();
    if (stop()) return absl::CancelledError("request abandoned while waiting for device memory");

    RequestMemory memory(std::move(*reservation), slot.stream());
    // Whatever way this returns, no DMA may still touch a client's pinned
    // pages: they can be unregistered and unmapped once the call ends.
    absl::Cleanup wait_for_pinned = [&] {
      if (plan.pinned()) cudaStreamSynchronize(slot.stream());
    };
    auto buffer = [&memory](int64_t bytes) -> absl::StatusOr<void*> {
      return bytes > 0 ? memory.Get(bytes) : absl::StatusOr<void*>(nullptr);
    };
    auto a = buffer(plan.a.buffer_bytes());
    auto b = buffer(plan.b.buffer_bytes());
    auto out = buffer(plan.out_buffer());
    auto ws = plan.workspace_in_slot
                  ? absl::StatusOr<void*>(plan.workspace ? slot.workspace() : nullptr)
                  : buffer(plan.workspace);
    for (const auto* r : {&a, &b, &out, &ws}) {
      if (!r->ok()) return r->status();
    }
    // The stream is idle here, so the upload begins as the first copy is
    // queued and the upload stage counts host gathering and DMA alike.
    if (auto s = slot.Record(Mark::kUploadBegin); !s.ok()) return s;
    StageTimes times;
    for (auto [input, dst] : {std::pair{&plan.a, *a}, std::pair{&plan.b, *b}}) {
      if (input->source == Source::kHost && input->pinned) {
        char* at = static_cast<char*>(dst);
        for (const auto& piece : *input->host) {
          GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(at, piece.data(), piece.size(),
                                                          cudaMemcpyHostToDevice, slot.stream()),
                                          "pinned upload cudaMemcpyAsync");
          at += piece.size();
        }
      } else if (input->source == Source::kHost) {
        if (auto s = slot.staging().Upload(dst, *input->host, slot.stream(), copier_); !s.ok())
          return s;
      } else if (input->source == Source::kPeer) {
        GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
            cudaMemcpyPeerAsync(dst, ordinal_, input->resident->data(), input->resident->ordinal(),
                                size_t(input->bytes), slot.stream()),
            "peer cudaMemcpyPeerAsync");
        if (!times.note.empty()) times.note += ", ";
        times.note += absl::StrCat(input == &plan.a ? "a" : "b",
                                   " copied from cuda:", input->resident->ordinal());
      }
    }
    if (stop()) return absl::CancelledError("request abandoned before its kernel ran");

    // The kernel follows the upload in stream order: no host wait between.
    if (auto s = slot.Record(Mark::kKernelStart); !s.ok()) return s;
    const void* a_ptr = plan.a.source == Source::kResident ? plan.a.resident->data() : *a;
    const void* b_ptr = plan.b.source == Source::kResident ? plan.b.resident->data() : *b;
    void* out_ptr = plan.out_resident ? job.out_resident->data() : *out;
    const kernels::Buffers buffers{a_ptr, b_ptr, out_ptr, *ws, size_t(plan.workspace)};
    if (auto s = job.variant->launch(job.problem, buffers, slot.launch_context()); !s.ok())
      return s;
    if (auto s = slot.Record(Mark::kKernelEnd); !s.ok()) return s;
    // Waiting here keeps the kernel's time out of the download stage.
    if (auto s = slot.WaitFor(Mark::kKernelEnd, "kernel wait"); !s.ok()) return s;

    if (plan.out_pinned) {
      // Registered pages: one DMA into them, no staging, no CPU copy.
      const auto download_start = Clock::now();
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
          cudaMemcpyAsync(job.out, *out, size_t(plan.out), cudaMemcpyDeviceToHost, slot.stream()),
          "pinned download cudaMemcpyAsync");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(slot.stream()), "pinned download wait");
      times.download_us = int64_t(common::MicrosSince(download_start));
    } else if (!plan.out_resident) {
      const auto download_start = Clock::now();
      if (auto s = slot.staging().Download(job.out, *out, size_t(plan.out), slot.stream(), copier_);
          !s.ok()) {
        return s;
      }
      times.download_us = int64_t(common::MicrosSince(download_start));
    }
    auto upload_us = slot.MicrosBetween(Mark::kUploadBegin, Mark::kKernelStart);
    if (!upload_us.ok()) return upload_us.status();
    auto compute_us = slot.MicrosBetween(Mark::kKernelStart, Mark::kKernelEnd);
    if (!compute_us.ok()) return compute_us.status();
    times.upload_us = plan.uploads() ? *upload_us : 0;
    times.compute_us = *compute_us;
    return times;
  }

  const int ordinal_;
  const int slot_count_;
  const DeviceDescription description_;
  int64_t zero_copy_bytes_ = 0;  // CudaDeviceOptions::zero_copy_bytes
  int batch_branches_ = 1;       // CudaDeviceOptions::batch_branches
  DeviceHealth health_;
  HostCopyPool copier_{6};
  std::atomic<int64_t> device_malloc_calls_{0};
  std::atomic<int64_t> host_alloc_calls_{0};
  // The slots' graph caches count here (declared before the slots).
  GraphCounts request_graph_counts_;
  GraphCounts batch_graph_counts_;
  Ceilings ceilings_;
  // Declared after the memory: the slots go first, while the pool is there.
  std::unique_ptr<DeviceMemory> memory_;
  std::unique_ptr<SlotPool> slots_;
  // Tensors: their memory is allocated and freed on this stream, and their
  // bytes move through these lanes.
  UniqueStream tensor_stream_;
  std::unique_ptr<TensorBlocks> tensor_blocks_;  // after the stream: freed on it
  std::unique_ptr<TransferLanes> lanes_;
};

}  // namespace

namespace {

// Sets how this device's host threads wait for stream work (--cuda_host_wait),
// keeping its other flags; "auto" leaves CUDA's own choice.
absl::Status SetHostWait(HostWait host_wait) {
  unsigned schedule = 0;
  switch (host_wait) {
    case HostWait::kAuto: return absl::OkStatus();
    case HostWait::kSpin: schedule = cudaDeviceScheduleSpin; break;
    case HostWait::kYield: schedule = cudaDeviceScheduleYield; break;
    case HostWait::kBlock: schedule = cudaDeviceScheduleBlockingSync; break;
  }
  unsigned flags = 0;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDeviceFlags(&flags), "cudaGetDeviceFlags");
  flags = (flags & ~unsigned(cudaDeviceScheduleMask)) | schedule;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaSetDeviceFlags(flags), "cudaSetDeviceFlags");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal,
                                                       const CudaDeviceOptions& options) {
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaSetDevice(ordinal), "cudaSetDevice");
  if (auto s = SetHostWait(options.host_wait); !s.ok()) return s;
  cudaDeviceProp prop;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, ordinal),
                                  "cudaGetDeviceProperties");
  DeviceDescription description;
  description.name = absl::StrCat("cuda:", ordinal, " ", prop.name);
  description.memory_bytes = int64_t(prop.totalGlobalMem);
  description.multiprocessors = prop.multiProcessorCount;
  description.backend = kernels::Backend::kCuda;
  description.pci_bus_id =
      absl::StrFormat("%08X:%02X:%02X.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
  auto device = std::make_unique<CudaDevice>(ordinal, std::max(1, options.streams_per_device),
                                             std::move(description));
  if (auto s = device->Init(options); !s.ok()) return s;
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace gpucompute::server::cuda
