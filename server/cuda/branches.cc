#include "server/cuda/branches.h"

#include <algorithm>
#include <utility>

#include "gpucompute/kernels/cuda_status.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

absl::Status Branches::Prepare() {
  if (count_ <= 1 || !streams_.empty()) return absl::OkStatus();
  std::vector<UniqueStream> streams;
  std::vector<UniqueEvent> joins;
  // Ordering only: events without timing are the cheapest to record.
  auto fork = CreateEvent(cudaEventDisableTiming);
  if (!fork.ok()) return fork.status();
  for (int b = 0; b < count_; ++b) {
    auto stream = CreateStream();
    if (!stream.ok()) return stream.status();
    auto join = CreateEvent(cudaEventDisableTiming);
    if (!join.ok()) return join.status();
    streams.push_back(std::move(*stream));
    joins.push_back(std::move(*join));
  }
  fork_ = std::move(*fork);
  joins_ = std::move(joins);
  streams_ = std::move(streams);
  return absl::OkStatus();
}

int Branches::Used(int members, int limit) const {
  return std::max(1, std::min({members, limit, int(streams_.size())}));
}

absl::Status Branches::FanOut(
    cudaStream_t origin, int members, int limit,
    const std::function<absl::Status(int member, int branch, cudaStream_t stream)>& launch) {
  const int used = Used(members, limit);
  if (used == 1) {
    for (int j = 0; j < members; ++j) {
      if (auto s = launch(j, 0, origin); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (auto s = CudaStatus(cudaEventRecord(fork_.get(), origin), "fork cudaEventRecord"); !s.ok())
    return s;
  absl::Status first_error;
  for (int b = 0; b < used; ++b) {
    cudaStream_t stream = streams_[size_t(b)].get();
    // A branch that could not wait for the fork never joined: nothing to
    // rejoin, and nothing of it may run.
    if (auto s =
            CudaStatus(cudaStreamWaitEvent(stream, fork_.get(), 0), "fork cudaStreamWaitEvent");
        !s.ok()) {
      first_error.Update(s);
      continue;
    }
    for (int j = b; j < members && first_error.ok(); j += used) {
      first_error.Update(launch(j, b, stream));
    }
    cudaEvent_t join = joins_[size_t(b)].get();
    first_error.Update(CudaStatus(cudaEventRecord(join, stream), "join cudaEventRecord"));
    first_error.Update(
        CudaStatus(cudaStreamWaitEvent(origin, join, 0), "join cudaStreamWaitEvent"));
  }
  return first_error;
}

}  // namespace gpucompute::server::cuda
