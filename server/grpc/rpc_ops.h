// The `op` label of each rpc of the Compute service, read from the service's
// descriptor: a new rpc is counted under its own label with no list to edit.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

#include "server/ops/metrics.h"

namespace gpucompute::server {

// The Compute service's descriptor: its rpcs in the order gRPC's generated
// Service registers them.
const google::protobuf::ServiceDescriptor& ComputeServiceDescriptor();

// The op `rpc` ("ListTensors") is counted under: its name in snake_case
// ("list_tensors"), except those whose labels dashboards already know
// (MatMul is "matmul", GetServerInfo "server_info", the three shared-memory
// calls "shared_memory"). MatMul, Transpose and Reduce are compute ops.
// Dies naming `rpc` when the service has no such rpc: a typo in a handler.
RpcOp RpcOpFor(absl::string_view rpc);

// "ListTensors" -> "list_tensors".
std::string SnakeCase(absl::string_view name);

}  // namespace gpucompute::server
