// Control calls: unary rpcs answered on the gRPC thread from the server's
// state, with no device work (GetServerInfo, the tensor and shared-memory
// lists, ...). Each is a function and a row in its file's table;
// ComputeService registers every row under its rpc, read from the service
// descriptor, so a new one edits no header and no list elsewhere.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "server/engine/compute_engine.h"
#include "server/engine/shared_memory.h"
#include "server/grpc/call_reactor.h"
#include "server/grpc/compute_service.h"

namespace gpucompute::server {

// What a control call may read: the service's state once it serves.
struct ControlContext {
  const kernels::Registry& registry;
  const ServiceConfig& config;
  ComputeEngine& engine;
  SharedMemoryRegistry* regions;  // null: the server runs without shared memory
};

// One control rpc: its name in the service, and the answer to a call that
// was admitted (token and readiness checked).
struct ControlCall {
  absl::string_view rpc;
  std::function<void(const ControlContext&, CallReactor&, const grpc::ByteBuffer* request,
                     grpc::ByteBuffer* response)>
      answer;
};

// The row of a handler that fills `Response` from `Request`: the request is
// parsed (a missing or unparsable one is INVALID_ARGUMENT naming its type),
// and the response is sent when the handler returns OK.
template <typename Request, typename Response>
ControlCall Control(absl::string_view rpc,
                    absl::Status (*handler)(const ControlContext&, const Request&, Response&)) {
  return ControlCall{rpc, [handler](const ControlContext& context, CallReactor& reactor,
                                    const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
                       Request parsed;
                       if (!reactor.Parse(request, parsed)) return;
                       Response* out = reactor.template Respond<Response>(response);
                       reactor.Complete(handler(context, parsed, *out));
                     }};
}

// Every control call: control_calls.cc's rows and shared_memory_calls.cc's.
std::vector<ControlCall> ControlCalls();
std::vector<ControlCall> SharedMemoryCalls();

}  // namespace gpucompute::server
