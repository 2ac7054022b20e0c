// gRPC transport settings shared by the server's listening ports: message
// size limits and HTTP/2 buffers tuned for large matrix payloads.
#pragma once

#include <grpcpp/server_builder.h>

namespace gpucompute::server {

void ApplyTransportOptions(grpc::ServerBuilder& builder);

}  // namespace gpucompute::server
