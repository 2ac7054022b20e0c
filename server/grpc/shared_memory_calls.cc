// RegisterSharedMemory, UnregisterSharedMemory and ListSharedMemory: the
// registry's control calls over gRPC. Ops, Upload and Download use the
// regions through server/grpc/tensor_requests.h's ResolveSlice.
#include "absl/strings/str_cat.h"
#include "server/grpc/control_calls.h"
#include "server/grpc/tensor_requests.h"

namespace gpucompute::server {
namespace {

void RegionToProto(const SharedMemoryRegionInfo& info, v1::SharedMemoryRegion* out) {
  out->set_name(info.name);
  out->set_key(info.key);
  out->set_offset(info.offset);
  out->set_byte_size(info.byte_size);
  out->set_pinned(info.pinned);
}

absl::Status RegisterSharedMemory(const ControlContext& c,
                                  const v1::RegisterSharedMemoryRequest& req,
                                  v1::SharedMemoryRegion& resp) {
  if (c.regions == nullptr) return SharedMemoryOff("shared memory");
  auto info = c.regions->Register(
      SharedMemoryRegionInfo{req.name(), req.key(), req.offset(), req.byte_size()});
  if (info.ok()) RegionToProto(*info, &resp);
  return info.status();
}

absl::Status UnregisterSharedMemory(const ControlContext& c,
                                    const v1::UnregisterSharedMemoryRequest& req,
                                    v1::UnregisterSharedMemoryResponse& resp) {
  if (c.regions == nullptr) return SharedMemoryOff("shared memory");
  auto count = c.regions->Unregister(req.name());
  if (count.ok()) resp.set_unregistered(*count);
  return count.status();
}

absl::Status ListSharedMemory(const ControlContext& c, const v1::ListSharedMemoryRequest&,
                              v1::ListSharedMemoryResponse& resp) {
  if (c.regions == nullptr) return SharedMemoryOff("shared memory");
  for (const SharedMemoryRegionInfo& info : c.regions->List()) {
    RegionToProto(info, resp.add_regions());
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ControlCall> SharedMemoryCalls() {
  return {
      Control("RegisterSharedMemory", &RegisterSharedMemory),
      Control("UnregisterSharedMemory", &UnregisterSharedMemory),
      Control("ListSharedMemory", &ListSharedMemory),
  };
}

}  // namespace gpucompute::server
