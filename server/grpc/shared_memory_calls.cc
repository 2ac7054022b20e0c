// RegisterSharedMemory, UnregisterSharedMemory and ListSharedMemory: the
// registry's calls over gRPC. Ops, Upload and Download use the regions
// through server/grpc/tensor_requests.h's ResolveSlice.
#include "absl/strings/str_cat.h"
#include "server/grpc/call_reactor.h"
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

}  // namespace

SharedMemoryRegistry* ComputeService::AdmitSharedMemory(grpc::CallbackServerContext* ctx,
                                                        CallReactor* reactor) {
  if (Admit(ctx, reactor) == nullptr) return nullptr;
  SharedMemoryRegistry* regions = regions_.load(std::memory_order_acquire);
  if (regions == nullptr) reactor->Complete(SharedMemoryOff("shared memory"));
  return regions;
}

grpc::ServerUnaryReactor* ComputeService::RegisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* request,
                                                               grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  v1::RegisterSharedMemoryRequest parsed;
  if (!reactor->Parse(request, parsed)) return reactor;
  const v1::RegisterSharedMemoryRequest* req = &parsed;
  v1::SharedMemoryRegion* resp = reactor->Respond<v1::SharedMemoryRegion>(response);
  auto info = regions->Register(
      SharedMemoryRegionInfo{req->name(), req->key(), req->offset(), req->byte_size()});
  if (info.ok()) RegionToProto(*info, resp);
  reactor->Complete(info.status());
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::UnregisterSharedMemory(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request,
                                                                 grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  v1::UnregisterSharedMemoryRequest parsed;
  if (!reactor->Parse(request, parsed)) return reactor;
  const v1::UnregisterSharedMemoryRequest* req = &parsed;
  auto* resp = reactor->Respond<v1::UnregisterSharedMemoryResponse>(response);
  auto count = regions->Unregister(req->name());
  if (count.ok()) resp->set_unregistered(*count);
  reactor->Complete(count.status());
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::ListSharedMemory(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  v1::ListSharedMemoryRequest req;
  if (!reactor->Parse(request, req)) return reactor;
  auto* resp = reactor->Respond<v1::ListSharedMemoryResponse>(response);
  for (const SharedMemoryRegionInfo& info : regions->List())
    RegionToProto(info, resp->add_regions());
  reactor->Complete(absl::OkStatus());
  return reactor;
}

}  // namespace gpucompute::server
