// gRPC transport settings shared by the server's listening ports: HTTP/2
// buffers tuned for large matrix payloads, and the bounds that keep idle or
// abusive connections from holding memory.
#pragma once

#include <grpcpp/server_builder.h>

#include <cstdint>

namespace gpucompute::server {

struct ConnectionLimits {
  // Memory gRPC may use for all connections' buffers (grpc::ResourceQuota);
  // under pressure it shrinks reads, and past it refuses new streams.
  int64_t memory_quota_bytes = int64_t{4} << 30;
  // A connection with no call in flight for this long is closed (GOAWAY). 0: never.
  int64_t max_idle_ms = 5 * 60 * 1000;
  // A connection older than this is asked to reconnect (in-flight calls
  // finish first, within max_age_grace_ms). 0: never.
  int64_t max_age_ms = 0;
  int64_t max_age_grace_ms = 60 * 1000;
  // Clients may ping no more often than this without data; a client that
  // keeps doing so is disconnected.
  int64_t min_ping_interval_ms = 10 * 1000;
};

void ApplyTransportOptions(grpc::ServerBuilder& builder, const ConnectionLimits& limits);

}  // namespace gpucompute::server
