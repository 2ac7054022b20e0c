// gRPC transport settings shared by the server's listening ports: HTTP/2
// buffers tuned for large matrix payloads, and the bounds that keep idle or
// abusive connections from holding memory.
#pragma once

#include <grpcpp/server_builder.h>

#include <cstdint>

#include "absl/time/time.h"

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

// Bytes that this process's connected stream sockets (TCP and unix) hold in
// the kernel, not yet taken by their peers: sent but unacknowledged, or not
// yet sent.
int64_t UnacknowledgedSocketBytes();

// Shutdown's last step before the connections close: waits until the
// answers already written have left for their clients (no socket holds
// bytes, twice in a row), or until `deadline`. Returns the bytes still held
// then (0: every answer left). gRPC closes a draining connection as soon as
// it has written its last answer into the socket; a client still reading
// that answer keeps sending flow-control updates, and the kernel answers
// data arriving at a closed socket with a reset that discards what it still
// held of the answer ("Connection reset by peer" on the client).
int64_t WaitForSocketsToDrain(absl::Time deadline);

}  // namespace gpucompute::server
