// Shared-memory regions: POSIX shared-memory objects of clients on the
// server's host, mapped by the server and, where a device can, pinned for
// DMA so the GPU copies straight from and into the client's pages.
//
// A client may shrink, unlink or rewrite its object while it is registered.
// The server then answers with wrong bytes or an error, never a crash. The
// server's CPU never loads from or stores into the mapping, where a page
// the client truncated away raises SIGBUS: it reaches the object through
// its file descriptor (pread/pwrite, a short read past a shrunk end). A
// device reaches it only by DMA to the pages pinned at registration, which
// stay allocated until they are unpinned, and only for slices of at least
// kMinDmaBytes (see dma_data). SharedMemoryRegion is the one place that
// hands out region bytes: Read, Write and dma_data.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute::server {

class Device;

struct SharedMemoryRegionInfo {
  std::string name;  // the client's name for it
  std::string key;   // shm_open name of the object, "/something"
  int64_t offset = 0;
  int64_t byte_size = 0;
  bool pinned = false;  // registered for DMA on the devices
};

class SharedMemoryRegion {
 public:
  // Opens `info.key` read-write, maps [offset, offset + byte_size) and asks
  // `pinner` (may be null) to pin it. NOT_FOUND / PERMISSION_DENIED name the
  // key; INVALID_ARGUMENT when the object is smaller than the region.
  static absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> Open(SharedMemoryRegionInfo info,
                                                                  Device* pinner);
  // Unpins, unmaps and closes: when the last op using it is done.
  ~SharedMemoryRegion();
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;

  const SharedMemoryRegionInfo& info() const { return info_; }
  bool pinned() const { return info_.pinned; }

  // OK when [offset, offset + bytes) lies inside the region; otherwise
  // INVALID_ARGUMENT naming `field`, the numbers and the region.
  absl::Status CheckSlice(int64_t offset, int64_t bytes, const std::string& field) const;

  // Slices this large and larger may go by DMA; smaller ones go through the
  // file. Measured on an H200 (driver 580): a host-to-device cudaMemcpy of
  // up to 4 KiB from registered memory is done by the driver with the CPU,
  // through the mapping, and kills the server with SIGBUS once the client
  // has truncated the object; from 64 KiB up, and device-to-host at every
  // size, the copy engine moves the pinned pages. The margin covers drivers
  // that inline more; tests/gpu/pinned_region_test.cc checks it on the device.
  static constexpr int64_t kMinDmaBytes = int64_t{256} << 10;

  // Where a device may copy [offset, offset + bytes) by DMA, from or into
  // the client's pinned pages; null when those bytes must go through Read
  // and Write instead (the region is not pinned, or the slice is smaller
  // than kMinDmaBytes). Never for the CPU to touch.
  char* dma_data(int64_t offset, int64_t bytes) const {
    return info_.pinned && bytes >= kMinDmaBytes ? data_ + offset : nullptr;
  }

  // Copies through the object's file, never the mapping (see above). A read
  // past an end the client shrank is FAILED_PRECONDITION naming the key.
  absl::Status Read(int64_t offset, int64_t bytes, void* dst) const;
  absl::Status Write(int64_t offset, const void* src, int64_t bytes) const;

 private:
  SharedMemoryRegion(SharedMemoryRegionInfo info, int fd, void* map, size_t map_bytes, char* data,
                     Device* pinner);

  SharedMemoryRegionInfo info_;
  const int fd_;
  void* const map_;
  const size_t map_bytes_;
  char* const data_;
  Device* const pinner_;  // who unpins it; null when not pinned
};

// A slice of a registered region, checked: inside it, and as long as the
// matrix it carries.
struct RegionSlice {
  std::shared_ptr<SharedMemoryRegion> region;
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct SharedMemoryOptions {
  int max_regions = 256;
  int64_t max_bytes = 0;  // registered bytes at most (pinned memory is locked)
};

// The regions registered with the server, by name. A region outlives the
// connection that registered it; Unregister (or the registry's end, at
// shutdown) lets it go, and an op still using it keeps it until the op ends.
class SharedMemoryRegistry {
 public:
  // `pinner` pins for every device (CUDA's portable registration); null on
  // the CPU backend, whose regions are read and written through the file.
  SharedMemoryRegistry(SharedMemoryOptions options, Device* pinner);
  // Lets every region go (an op still using one keeps it until it ends).
  ~SharedMemoryRegistry();

  // ALREADY_EXISTS for a name taken, RESOURCE_EXHAUSTED past the bounds,
  // INVALID_ARGUMENT naming the field for a bad name, key, offset or size.
  absl::StatusOr<SharedMemoryRegionInfo> Register(const SharedMemoryRegionInfo& asked);
  // "" unregisters every region. NOT_FOUND for a name not registered.
  absl::StatusOr<int64_t> Unregister(const std::string& name);
  // NOT_FOUND naming `field` and the region when it is not registered.
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> Find(const std::string& name,
                                                           const std::string& field) const;
  std::vector<SharedMemoryRegionInfo> List() const;
  int64_t registered_bytes() const;

 private:
  const SharedMemoryOptions options_;
  Device* const pinner_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<SharedMemoryRegion>> regions_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gpucompute::server
