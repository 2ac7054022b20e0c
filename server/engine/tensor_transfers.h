// Moves tensor bytes between host memory and the devices on a few threads of
// its own: a GPU copy waits on a stream, and neither gRPC's threads nor the
// compute workers should wait for it. Each operation calls `done` once, on
// one of these threads. Uploads and downloads are chunked by the caller, so
// no whole payload is ever held in host memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/common/work_queue.h"
#include "server/engine/device.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_store.h"

namespace gpucompute::server {

class TensorTransfers {
 public:
  // `store` and `devices` must outlive this.
  TensorTransfers(TensorStore& store, const std::vector<std::unique_ptr<Device>>& devices,
                  int threads);
  TensorTransfers(const TensorTransfers&) = delete;
  TensorTransfers& operator=(const TensorTransfers&) = delete;

  TensorStore& store() { return store_; }

  // A new unlisted tensor of `shape` on the device holding the fewest
  // tensor bytes (see TensorStore::Create).
  void Create(const TensorShape& shape, absl::Time deadline,
              std::function<void(absl::StatusOr<std::shared_ptr<Tensor>>)> done);
  // Copies `src` to the tensor at byte `offset`. `src` stays valid until
  // done; `pinned`: it is registered memory the device may DMA from.
  void Write(std::shared_ptr<Tensor> tensor, int64_t offset, HostPieces src,
             std::function<void(absl::Status)> done, bool pinned = false);
  // Copies `bytes` from byte `offset` of the tensor to `dst` (registered
  // memory the device may DMA into when `pinned`).
  void Read(std::shared_ptr<Tensor> tensor, int64_t offset, int64_t bytes, void* dst,
            std::function<void(absl::Status)> done, bool pinned = false);

  // The tensor's whole payload from / to `region` at byte `region_offset`
  // (the caller checked the slice): by DMA straight from / into the pages
  // when the region is pinned, else through the object's file, chunk by
  // chunk, so a client shrinking its object causes an error, not a crash.
  void WriteFromRegion(std::shared_ptr<Tensor> tensor,
                       std::shared_ptr<const SharedMemoryRegion> region, int64_t region_offset,
                       std::function<void(absl::Status)> done);
  void ReadToRegion(std::shared_ptr<Tensor> tensor,
                    std::shared_ptr<const SharedMemoryRegion> region, int64_t region_offset,
                    std::function<void(absl::Status)> done);

 private:
  void Post(std::function<void()> work) { queue_.Post(std::move(work)); }

  TensorStore& store_;
  const std::vector<std::unique_ptr<Device>>& devices_;
  // Last, so destroyed first: runs what is queued, then joins, while the
  // store and devices are still there.
  common::WorkQueue queue_;
};

}  // namespace gpucompute::server
