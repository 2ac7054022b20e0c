// The control calls that read the server's state: GetServerInfo,
// ReleaseTensors and ListTensors. To add one: its handler here and its row
// in ControlCalls() (CONTRIBUTING.md, "Add a control RPC").
#include "server/grpc/control_calls.h"

#include <string>
#include <vector>

#include "server/grpc/convert.h"
#include "server/grpc/tensor_requests.h"

namespace gpucompute::server {
namespace {

absl::Status GetServerInfo(const ControlContext& c, const v1::ServerInfoRequest&,
                           v1::ServerInfo& resp) {
  resp.set_version(c.config.version);
  resp.set_backend(kernels::BackendName(c.engine.backend()));
  for (const auto& device : c.engine.devices()) {
    v1::DeviceInfo* info = resp.add_devices();
    info->set_name(device->description().name);
    info->set_memory_bytes(device->description().memory_bytes);
    info->set_multiprocessors(device->description().multiprocessors);
    const DeviceCounters counters = device->counters();
    info->set_healthy(counters.healthy);
    info->set_pool_reserved_bytes(counters.pool_reserved_bytes);
    info->set_pool_used_bytes(counters.pool_used_bytes);
    info->set_device_malloc_calls(counters.device_malloc_calls);
    info->set_pool_growths(counters.pool_growths);
    info->set_host_alloc_calls(counters.host_alloc_calls);
    info->set_peak_gbytes_per_s(device->ceilings().gbytes_per_s);
    info->set_peak_gflops_fp32(device->ceilings().gflops);
    info->set_peak_gflops_fp64(device->ceilings().GFlopsFor(kernels::DType::kFloat64));
    info->set_peak_gflops_half(device->ceilings().GFlopsFor(kernels::DType::kBFloat16));
  }
  for (const kernels::Variant* v : c.registry.List(c.engine.backend())) {
    v1::VariantInfo* info = resp.add_variants();
    info->set_op(ToProto(v->op));
    info->set_name(v->name);
    info->set_description(v->description);
    for (kernels::DType d : v->dtypes) info->add_dtypes(ToProto(d));
    info->set_reduced_precision(v->reduced_precision);
  }
  resp.set_max_matrix_bytes(c.config.limits.max_matrix_bytes);
  if (const TensorStore* tensors = c.engine.tensors()) {
    resp.set_tensor_memory_bytes(tensors->limit_bytes());
    resp.set_tensor_ttl_seconds(absl::ToInt64Seconds(tensors->default_ttl()));
    resp.set_instance_name(tensors->instance());
  }
  resp.set_shared_memory_allowed(c.regions != nullptr);
  resp.set_max_batch_size(c.engine.batching().max_batch_size);
  resp.set_batch_delay_us(int32_t(absl::ToInt64Microseconds(c.engine.batching().delay)));
  return absl::OkStatus();
}

absl::Status ReleaseTensors(const ControlContext& c, const v1::ReleaseTensorsRequest& req,
                            v1::ReleaseTensorsResponse& resp) {
  if (TensorStore* tensors = c.engine.tensors()) {
    // Ids this server does not hold (unknown, already released, expired,
    // another instance's) are skipped: releasing is idempotent, and
    // `released` says how many were held.
    const std::vector<std::string> ids(req.tensor_ids().begin(), req.tensor_ids().end());
    const TensorStore::Released released = tensors->Release(ids);
    resp.set_released(released.count);
    resp.set_bytes_freed(released.bytes);
  }
  return absl::OkStatus();
}

absl::Status ListTensors(const ControlContext& c, const v1::ListTensorsRequest&,
                         v1::ListTensorsResponse& resp) {
  if (const TensorStore* tensors = c.engine.tensors()) {
    for (const TensorInfo& info : tensors->List()) ToProto(info, resp.add_tensors());
    const TensorCounters counters = tensors->counters();
    resp.set_held_bytes(counters.held_bytes);
    resp.set_limit_bytes(counters.limit_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ControlCall> ControlCalls() {
  std::vector<ControlCall> calls = {
      Control("GetServerInfo", &GetServerInfo),
      Control("ReleaseTensors", &ReleaseTensors),
      Control("ListTensors", &ListTensors),
  };
  for (ControlCall& call : SharedMemoryCalls()) calls.push_back(std::move(call));
  return calls;
}

}  // namespace gpucompute::server
