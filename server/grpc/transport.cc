#include "server/grpc/transport.h"

#include <limits>

namespace gpucompute::server {

void ApplyTransportOptions(grpc::ServerBuilder& builder) {
  // Protobuf caps one message near 2 GiB; allow up to that.
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  // The same as the client library's ApplyLargeMessageTransport: HTTP/2's
  // largest frame (a 64 MiB matrix in 4 frames, not 4096), a whole matrix in
  // flight before the first WINDOW_UPDATE instead of a window grown from
  // 64 KiB by the BDP estimator, and socket reads in MiB chunks, not 8 KiB.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4 << 20);
  builder.AddChannelArgument(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 256 << 10);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 20);
}

}  // namespace gpucompute::server
