#include "server/cuda/profile_counters.h"

#include <cuda_runtime.h>

#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/read_ceiling.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CudaStatus;

absl::Status ReadProfileCounters(CounterReader& reader, const kernels::Problem& p,
                                 const kernels::Buffers& buffers, Slot& slot, void* flush,
                                 int64_t flush_bytes, const StopRequested& stop,
                                 std::vector<VariantMeasurement>& results) {
  const cudaStream_t stream = slot.stream();
  const kernels::LaunchContext ctx = slot.launch_context();
  int device = 0, sms = 0;
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDevice(&device), "cudaGetDevice");
  GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  int round = 0;
  for (VariantMeasurement& m : results) {
    if (!m.ok) continue;
    if (stop()) return absl::CancelledError("profile abandoned: the client went away");
    CounterReplay replay;
    // Each step returns once the device is done, so the profiler's range
    // holds the launch and nothing else of this request.
    replay.prepare = [&]() -> absl::Status {
      // The L2 left with clean lines only (see FlushL2Clean), so the
      // range's DRAM counters are the variant's own.
      if (flush != nullptr) {
        if (auto s =
                CudaStatus(FlushL2Clean(flush, flush_bytes, sms * 8, ++round, stream), "L2 flush");
            !s.ok())
          return s;
      }
      return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    };
    replay.launch = [&]() -> absl::Status {
      if (auto s = m.variant->launch(p, buffers, ctx); !s.ok()) return s;
      return CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    };
    auto counters = ReadVariantCounters(reader, *m.variant, p, replay);
    if (!counters.ok()) return counters.status();
    m.counters = std::move(counters->values);
    m.counters_note = std::move(counters->note);
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::server::cuda
