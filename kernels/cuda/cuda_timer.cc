#include "gpucompute/kernels/cuda_timer.h"

#include <algorithm>
#include <utility>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::kernels::cuda {

absl::StatusOr<EventTimer> EventTimer::Create() {
  EventTimer timer;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&timer.start_), "cudaEventCreate");
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&timer.stop_), "cudaEventCreate");
  return timer;
}

EventTimer::EventTimer(EventTimer&& other) noexcept
    : start_(std::exchange(other.start_, nullptr)), stop_(std::exchange(other.stop_, nullptr)) {}

EventTimer& EventTimer::operator=(EventTimer&& other) noexcept {
  std::swap(start_, other.start_);
  std::swap(stop_, other.stop_);
  return *this;
}

EventTimer::~EventTimer() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
}

absl::Status EventTimer::Start(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(start_, stream), "cudaEventRecord(start)");
}

absl::Status EventTimer::Stop(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(stop_, stream), "cudaEventRecord(stop)");
}

absl::StatusOr<double> EventTimer::ElapsedMs() {
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  float ms = 0;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
  return double(ms);
}

absl::StatusOr<std::vector<double>> TimeLaunches(EventTimer& timer, cudaStream_t stream, int warmup,
                                                 int repetitions,
                                                 const std::function<absl::Status()>& launch,
                                                 const std::function<bool()>& stop,
                                                 const std::function<absl::Status()>& before_each) {
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status s = launch(); !s.ok()) return s;
  }
  std::vector<double> ms;
  ms.reserve(size_t(std::max(repetitions, 0)));
  for (int i = 0; i < repetitions && !(stop && stop()); ++i) {
    if (before_each) {
      if (absl::Status s = before_each(); !s.ok()) return s;
    }
    if (absl::Status s = timer.Start(stream); !s.ok()) return s;
    if (absl::Status s = launch(); !s.ok()) return s;
    if (absl::Status s = timer.Stop(stream); !s.ok()) return s;
    auto elapsed = timer.ElapsedMs();
    if (!elapsed.ok()) return elapsed.status();
    ms.push_back(*elapsed);
  }
  return ms;
}

}  // namespace gpucompute::kernels::cuda
