#include "server/cuda/slot.h"

#include <utility>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

absl::StatusOr<std::unique_ptr<Slot>> Slot::Create(std::atomic<int64_t>& device_malloc_calls,
                                                   std::atomic<int64_t>& host_alloc_calls,
                                                   const SlotOptions& options) {
  auto stream = CreateStream();
  if (!stream.ok()) return stream.status();
  std::array<UniqueEvent, 4> marks;
  for (UniqueEvent& mark : marks) {
    auto event = CreateEvent();
    if (!event.ok()) return event.status();
    mark = std::move(*event);
  }
  auto scratch = DeviceMalloc(kScratchBytes, "cudaMalloc(scratch)", device_malloc_calls);
  if (!scratch.ok()) return scratch.status();
  auto workspace = DeviceMalloc(kWorkspaceBytes, "cudaMalloc(workspace)", device_malloc_calls);
  if (!workspace.ok()) return workspace.status();
  auto timer = kernels::cuda::EventTimer::Create();
  if (!timer.ok()) return timer.status();
  auto cublas = CreateCublas();
  if (!cublas.ok()) return cublas.status();
  auto staging = StagingBuffers::Create(host_alloc_calls);
  if (!staging.ok()) return staging.status();
  return std::unique_ptr<Slot>(new Slot(std::move(*stream), std::move(marks), std::move(*scratch),
                                        std::move(*workspace), std::move(*timer),
                                        std::move(*cublas), std::move(*staging), options));
}

Slot::Slot(UniqueStream stream, std::array<UniqueEvent, 4> marks, UniqueDeviceMemory scratch,
           UniqueDeviceMemory workspace, kernels::cuda::EventTimer timer, UniqueCublas cublas,
           std::unique_ptr<StagingBuffers> staging, const SlotOptions& options)
    : stream_(std::move(stream)),
      marks_(std::move(marks)),
      scratch_(std::move(scratch)),
      workspace_(std::move(workspace)),
      timer_(std::move(timer)),
      cublas_(std::move(cublas)),
      staging_(std::move(staging)),
      batch_branches_(options.batch_branches),
      batch_graphs_(std::make_unique<GraphCache>(options.batch_graphs, /*sightings=*/1,
                                                 options.batch_counts)),
      request_graphs_(std::make_unique<GraphCache>(options.request_graphs, /*sightings=*/2,
                                                   options.request_counts)) {}

absl::Status Slot::Record(Mark mark, bool in_graph) {
  return CudaStatus(
      cudaEventRecordWithFlags(event(mark), stream(), in_graph ? cudaEventRecordExternal : 0u),
      "cudaEventRecord");
}

absl::Status Slot::EnqueueStages(bool in_graph, size_t up_bytes, const void* down_from,
                                 size_t down_bytes, absl::FunctionRef<absl::Status()> kernels) {
  if (up_bytes > 0) {
    if (auto s = Record(Mark::kUploadBegin, in_graph); !s.ok()) return s;
    if (auto s = CudaStatus(cudaMemcpyAsync(scratch(), staging_->chunk(0), up_bytes,
                                            cudaMemcpyHostToDevice, stream()),
                            "upload cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
  }
  if (auto s = Record(Mark::kKernelStart, in_graph); !s.ok()) return s;
  if (auto s = kernels(); !s.ok()) return s;
  if (auto s = Record(Mark::kKernelEnd, in_graph); !s.ok()) return s;
  if (down_bytes > 0) {
    if (auto s = CudaStatus(cudaMemcpyAsync(staging_->chunk(1), down_from, down_bytes,
                                            cudaMemcpyDeviceToHost, stream()),
                            "download cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
    if (auto s = Record(Mark::kDownloaded, in_graph); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Slot::WaitFor(Mark mark, const char* what) {
  return CudaStatus(cudaEventSynchronize(event(mark)), what);
}

absl::StatusOr<int64_t> Slot::MicrosBetween(Mark from, Mark to) const {
  float ms = 0;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, event(from), event(to)),
                                  "cudaEventElapsedTime");
  return int64_t(ms * 1000.0f);
}

absl::StatusOr<StageTimes> Slot::Stages(bool uploaded, bool downloaded) const {
  auto upload_us =
      uploaded ? MicrosBetween(Mark::kUploadBegin, Mark::kKernelStart) : absl::StatusOr<int64_t>(0);
  auto compute_us = MicrosBetween(Mark::kKernelStart, Mark::kKernelEnd);
  auto download_us =
      downloaded ? MicrosBetween(Mark::kKernelEnd, Mark::kDownloaded) : absl::StatusOr<int64_t>(0);
  for (const auto* t : {&upload_us, &compute_us, &download_us}) {
    if (!t->ok()) return t->status();
  }
  StageTimes times;
  times.upload_us = *upload_us;
  times.compute_us = *compute_us;
  times.download_us = *download_us;
  return times;
}

}  // namespace gpucompute::server::cuda
