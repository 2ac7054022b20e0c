// The one way work on a stream is timed: a pair of CUDA events around each
// run, read after the second has fired. Used by Profile, calibration, the
// ceilings and the bench alike.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "absl/status/statusor.h"

namespace gpucompute::kernels::cuda {

// A start/stop event pair, destroyed with the timer.
class EventTimer {
 public:
  static absl::StatusOr<EventTimer> Create();
  EventTimer(EventTimer&& other) noexcept;
  EventTimer& operator=(EventTimer&& other) noexcept;
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer();

  absl::Status Start(cudaStream_t stream);
  absl::Status Stop(cudaStream_t stream);
  // Waits for the stop event; milliseconds between the two.
  absl::StatusOr<double> ElapsedMs();

 private:
  EventTimer() = default;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Runs `launch` `warmup` times untimed, then up to `repetitions` times, each
// between the timer's events on `stream`; milliseconds of each timed run.
// `stop` (optional) is polled before each timed run and ends the loop early.
// `before_each` (optional) is queued on `stream` before each timed run,
// outside the timed interval: e.g. a write that flushes the L2.
absl::StatusOr<std::vector<double>> TimeLaunches(
    EventTimer& timer, cudaStream_t stream, int warmup, int repetitions,
    const std::function<absl::Status()>& launch, const std::function<bool()>& stop = nullptr,
    const std::function<absl::Status()>& before_each = nullptr);

}  // namespace gpucompute::kernels::cuda
