// Shared memory for clients on the server's host (the server runs with
// --allow_shared_memory): a POSIX shared-memory object this process creates
// and maps, registered with the server, which maps it too and pins it for
// DMA. A matrix placed in it travels as a name, an offset and a size: ops
// read operands from it and write results into it with no bytes on the
// socket, and on a GPU server the device copies straight from and into its
// pages.
//
//   auto region = gpucompute::SharedMemoryRegion::Create(*client, 64 << 20);
//   auto a = region->View(gpucompute::DType::kFloat32, 2048, 2048);          // offset 0
//   auto out = region->View(gpucompute::DType::kFloat32, 2048, 2048, a->byte_size());
//   std::copy(..., a->as<float>());                                         // fill in place
//   gpucompute::OpOptions options;
//   options.output = *out;
//   client->Transpose(*a, options);                                          // result in *out
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gpucompute/matrix.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute {

class Client;
namespace internal {
struct ClientCore;
}  // namespace internal

// A rows x cols matrix of `dtype` at byte `offset` of registered region
// `region`, and where it lies in this process's mapping. Not owning: the
// region must outlive the calls that use it.
struct SharedMemoryView {
  std::string region;  // the name the region was registered under
  int64_t offset = 0;
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  char* data = nullptr;
  int64_t byte_size() const { return rows * cols * DTypeSize(dtype); }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data);
  }
};

// Owning: the destructor unregisters the region (best effort), unmaps the
// object and unlinks it. Move-only; it keeps the channel alive, so it may
// outlive the Client that made it.
class SharedMemoryRegion {
 public:
  // Creates an object of `bytes` under a fresh key ("/gpucompute-<pid>-<n>-<random>"),
  // maps it and registers it as `name` (empty: the key without its "/").
  static absl::StatusOr<SharedMemoryRegion> Create(const Client& client, int64_t bytes,
                                                   std::string name = "");

  SharedMemoryRegion(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion& operator=(SharedMemoryRegion&& other) noexcept;
  SharedMemoryRegion(const SharedMemoryRegion&) = delete;
  SharedMemoryRegion& operator=(const SharedMemoryRegion&) = delete;
  ~SharedMemoryRegion();

  // Unregisters, unmaps and unlinks now; the unregister's status.
  absl::Status Close();

  const std::string& name() const { return name_; }
  const std::string& key() const { return key_; }
  int64_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }  // the server pinned it for DMA
  char* data() const { return data_; }

  // The matrix at `offset`; INVALID_ARGUMENT naming the numbers when it
  // does not fit in the region.
  absl::StatusOr<SharedMemoryView> View(DType dtype, int64_t rows, int64_t cols,
                                        int64_t offset = 0) const;

 private:
  SharedMemoryRegion() = default;
  void Unmap();

  std::shared_ptr<const internal::ClientCore> core_;
  std::string name_, key_;
  int64_t bytes_ = 0;
  bool pinned_ = false;
  int fd_ = -1;
  char* data_ = nullptr;
};

}  // namespace gpucompute
