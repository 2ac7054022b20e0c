#include "server/transport.h"

#include <limits>

namespace gpucompute::server {

void ApplyTransportOptions(grpc::ServerBuilder& builder) {
  // Protobuf caps one message near 2 GiB; allow up to that.
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
}

}  // namespace gpucompute::server
