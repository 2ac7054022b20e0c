#include "server/grpc/rpc_ops.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute::server {
namespace {

// Labels kept from before they were derived, as the dashboards, alerts and
// scripts that select on them know them.
constexpr std::pair<absl::string_view, absl::string_view> kKeptLabels[] = {
    {"MatMul", "matmul"},
    {"GetServerInfo", "server_info"},
    {"RegisterSharedMemory", "shared_memory"},
    {"UnregisterSharedMemory", "shared_memory"},
    {"ListSharedMemory", "shared_memory"},
};

// Every rpc of the service with its op, made once and kept for the process
// (RpcOp::label points into `labels`).
struct RpcOpTable {
  std::deque<std::string> labels;
  absl::flat_hash_map<std::string, RpcOp> ops;
};

const RpcOpTable& RpcOps() {
  static const RpcOpTable* table = [] {
    auto* t = new RpcOpTable;
    const google::protobuf::ServiceDescriptor& service = ComputeServiceDescriptor();
    for (int i = 0; i < service.method_count(); ++i) {
      const std::string& name = service.method(i)->name();
      std::string label = SnakeCase(name);
      for (const auto& [rpc, kept] : kKeptLabels) {
        if (rpc == name) label = std::string(kept);
      }
      RpcOp op{t->labels.emplace_back(std::move(label)), std::nullopt};
      for (kernels::Op compute : kernels::kAllOps) {
        if (op.label == kernels::OpName(compute)) op = ComputeRpcOp(compute);
      }
      t->ops.emplace(name, op);
    }
    return t;
  }();
  return *table;
}

}  // namespace

const google::protobuf::ServiceDescriptor& ComputeServiceDescriptor() {
  // Through a message of the same file: naming it links the generated code
  // that registers the file's descriptors.
  static const google::protobuf::ServiceDescriptor* service =
      v1::ServerInfo::descriptor()->file()->FindServiceByName("Compute");
  return *service;
}

std::string SnakeCase(absl::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (std::isupper(c) && i > 0) out.push_back('_');
    out.push_back(static_cast<char>(std::tolower(c)));
  }
  return out;
}

RpcOp RpcOpFor(absl::string_view rpc) {
  const auto& ops = RpcOps().ops;
  auto it = ops.find(rpc);
  if (it == ops.end()) {
    std::fprintf(stderr, "gpucompute: the Compute service has no rpc %.*s\n",
                 static_cast<int>(rpc.size()), rpc.data());
    std::abort();
  }
  return it->second;
}

}  // namespace gpucompute::server
