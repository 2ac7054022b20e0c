// RegisterSharedMemory, UnregisterSharedMemory and ListSharedMemory: the
// registry's calls over gRPC. Ops, Upload and Download use the regions
// through server/grpc/tensor_requests.h's ResolveSlice.
#include "absl/strings/str_cat.h"
#include "server/grpc/call_reactor.h"
#include "server/grpc/tensor_requests.h"

namespace gpucompute::server {
namespace {

void ToProto(const SharedMemoryRegionInfo& info, v1::SharedMemoryRegion* out) {
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

grpc::ServerUnaryReactor* ComputeService::RegisterSharedMemory(
    grpc::CallbackServerContext* ctx, const v1::RegisterSharedMemoryRequest* req,
    v1::SharedMemoryRegion* resp) {
  auto* reactor =
      new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_started_, calls_in_flight_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  auto info = regions->Register(
      SharedMemoryRegionInfo{req->name(), req->key(), req->offset(), req->byte_size()});
  if (info.ok()) ToProto(*info, resp);
  reactor->Complete(info.status());
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::UnregisterSharedMemory(
    grpc::CallbackServerContext* ctx, const v1::UnregisterSharedMemoryRequest* req,
    v1::UnregisterSharedMemoryResponse* resp) {
  auto* reactor =
      new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_started_, calls_in_flight_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  auto count = regions->Unregister(req->name());
  if (count.ok()) resp->set_unregistered(*count);
  reactor->Complete(count.status());
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::ListSharedMemory(grpc::CallbackServerContext* ctx,
                                                           const v1::ListSharedMemoryRequest*,
                                                           v1::ListSharedMemoryResponse* resp) {
  auto* reactor =
      new CallReactor(ctx, metrics_, RpcOp::kSharedMemory, calls_started_, calls_in_flight_);
  SharedMemoryRegistry* regions = AdmitSharedMemory(ctx, reactor);
  if (regions == nullptr) return reactor;
  for (const SharedMemoryRegionInfo& info : regions->List()) ToProto(info, resp->add_regions());
  reactor->Complete(absl::OkStatus());
  return reactor;
}

}  // namespace gpucompute::server
