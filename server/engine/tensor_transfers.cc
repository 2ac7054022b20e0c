#include "server/engine/tensor_transfers.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

int64_t TotalBytes(const HostPieces& pieces) {
  int64_t total = 0;
  for (const auto& p : pieces) total += int64_t(p.size());
  return total;
}

// The range [offset, offset + bytes) lies within the tensor.
absl::Status CheckRange(const Tensor& t, int64_t offset, int64_t bytes) {
  if (offset >= 0 && bytes >= 0 && offset <= t.bytes() && bytes <= t.bytes() - offset) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("bytes [", offset, ", ", offset, " + ", bytes,
                                          ") outside tensor ", t.id(), " of ", t.bytes(),
                                          " bytes"));
}

}  // namespace

TensorTransfers::TensorTransfers(TensorStore& store,
                                 const std::vector<std::unique_ptr<Device>>& devices, int threads)
    : store_(store), devices_(devices), queue_(std::max(1, threads), "transfer") {}

void TensorTransfers::Create(const TensorShape& shape, absl::Time deadline,
                             std::function<void(absl::StatusOr<std::shared_ptr<Tensor>>)> done) {
  Post([this, shape, deadline, done = std::move(done)] {
    Device* device = store_.PlaceNew(devices_);
    if (device == nullptr) {
      done(absl::UnavailableError("no healthy device to hold a tensor"));
      return;
    }
    done(store_.Create(*device, shape, deadline));
  });
}

void TensorTransfers::Write(std::shared_ptr<Tensor> tensor, int64_t offset, HostPieces src,
                            std::function<void(absl::Status)> done, bool pinned) {
  Post([tensor = std::move(tensor), offset, src = std::move(src), done = std::move(done), pinned] {
    if (auto s = CheckRange(*tensor, offset, TotalBytes(src)); !s.ok()) {
      done(s);
      return;
    }
    done(tensor->device().WriteResident(tensor->memory(), offset, src, pinned));
  });
}

void TensorTransfers::Read(std::shared_ptr<Tensor> tensor, int64_t offset, int64_t bytes, void* dst,
                           std::function<void(absl::Status)> done, bool pinned) {
  Post([tensor = std::move(tensor), offset, bytes, dst, done = std::move(done), pinned] {
    if (auto s = CheckRange(*tensor, offset, bytes); !s.ok()) {
      done(s);
      return;
    }
    done(tensor->device().ReadResident(tensor->memory(), offset, bytes, dst, pinned));
  });
}

namespace {

// Bytes per copy through a region's file when it is not pinned.
constexpr int64_t kRegionChunkBytes = int64_t{8} << 20;

}  // namespace

void TensorTransfers::WriteFromRegion(std::shared_ptr<Tensor> tensor,
                                      std::shared_ptr<const SharedMemoryRegion> region,
                                      int64_t region_offset,
                                      std::function<void(absl::Status)> done) {
  Post([tensor = std::move(tensor), region = std::move(region), region_offset,
        done = std::move(done)] {
    Device& device = tensor->device();
    const int64_t total = tensor->bytes();
    if (char* dma = region->dma_data(region_offset, total)) {
      const HostPieces src{{dma, size_t(total)}};
      done(device.WriteResident(tensor->memory(), 0, src, /*src_pinned=*/true));
      return;
    }
    std::vector<char> chunk(size_t(std::min(total, kRegionChunkBytes)));
    for (int64_t at = 0; at < total; at += kRegionChunkBytes) {
      const int64_t n = std::min(kRegionChunkBytes, total - at);
      if (auto s = region->Read(region_offset + at, n, chunk.data()); !s.ok()) return done(s);
      const HostPieces src{{chunk.data(), size_t(n)}};
      if (auto s = device.WriteResident(tensor->memory(), at, src); !s.ok()) return done(s);
    }
    done(absl::OkStatus());
  });
}

void TensorTransfers::ReadToRegion(std::shared_ptr<Tensor> tensor,
                                   std::shared_ptr<const SharedMemoryRegion> region,
                                   int64_t region_offset, std::function<void(absl::Status)> done) {
  Post([tensor = std::move(tensor), region = std::move(region), region_offset,
        done = std::move(done)] {
    Device& device = tensor->device();
    const int64_t total = tensor->bytes();
    if (char* dma = region->dma_data(region_offset, total)) {
      done(device.ReadResident(tensor->memory(), 0, total, dma, /*dst_pinned=*/true));
      return;
    }
    std::vector<char> chunk(size_t(std::min(total, kRegionChunkBytes)));
    for (int64_t at = 0; at < total; at += kRegionChunkBytes) {
      const int64_t n = std::min(kRegionChunkBytes, total - at);
      if (auto s = device.ReadResident(tensor->memory(), at, n, chunk.data()); !s.ok())
        return done(s);
      if (auto s = region->Write(region_offset + at, chunk.data(), n); !s.ok()) return done(s);
    }
    done(absl::OkStatus());
  });
}

}  // namespace gpucompute::server
