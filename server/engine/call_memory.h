// Where one compute call's host bytes live. An operand named as a
// shared-memory slice is reached by DMA in the region's pinned pages where
// the region allows (SharedMemoryRegion::dma_data), else read through the
// region's file into a pooled buffer. The result goes into the output
// slice's pinned pages, or into a pooled buffer that Finish writes through
// the region's file, or into a pooled buffer handed to the caller. Buffers
// not handed over go back to the pool when this is destroyed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/engine/device.h"
#include "server/engine/host_buffers.h"
#include "server/engine/shared_memory.h"

namespace gpucompute::server {

class CallMemory {
 public:
  // `pool` (null: fresh buffers) outlives this; `out_region` is where the
  // result goes, when not back to the caller.
  CallMemory(HostBufferPool* pool, std::optional<RegionSlice> out_region);
  ~CallMemory();
  CallMemory(const CallMemory&) = delete;
  CallMemory& operator=(const CallMemory&) = delete;

  struct Operand {
    HostPieces pieces;
    bool pinned = false;  // the region's pinned pages: a device reaches them by DMA only
  };
  // The operand in `slice`, on the calling thread.
  absl::StatusOr<Operand> Input(const RegionSlice& slice);

  // Whether the result goes straight into pinned region pages (DMA only).
  bool output_pinned() const { return out_dma_ != nullptr; }
  // Where a result of `bytes` goes; called once, on the device's worker.
  void* Output(size_t bytes);
  // After a successful run: the result written through the output region's
  // file when it could not be written in place.
  absl::Status Finish();
  // The result's bytes when they go back to the caller (no output region);
  // null otherwise. The caller returns the buffer to the pool when done.
  std::unique_ptr<std::string> TakeResult();

 private:
  std::unique_ptr<std::string> Acquire(size_t bytes);

  HostBufferPool* const pool_;
  const std::optional<RegionSlice> out_region_;
  char* const out_dma_;
  std::unique_ptr<std::string> result_;
  std::vector<std::unique_ptr<std::string>> copies_;  // operands read through a file
};

}  // namespace gpucompute::server
