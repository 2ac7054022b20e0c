#include "server/grpc/transport.h"

#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "absl/time/clock.h"

namespace gpucompute::server {
namespace {

int ClampToInt(int64_t v) {
  return int(std::clamp<int64_t>(v, 0, std::numeric_limits<int>::max()));
}

}  // namespace

void ApplyTransportOptions(grpc::ServerBuilder& builder, const ConnectionLimits& limits) {
  // Protobuf caps one message near 2 GiB; allow up to that.
  builder.SetMaxReceiveMessageSize(std::numeric_limits<int>::max());
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  // As the client library's ApplyLargeMessageTransport: HTTP/2's largest
  // frame (a 64 MiB matrix in 4 frames, not 4096), and a whole matrix in
  // flight before the first WINDOW_UPDATE instead of a window grown from
  // 64 KiB by the BDP estimator. Socket reads, unlike the client's, start at
  // 8 KiB: every connection keeps a read buffer of its current read size, so
  // the client's 4 MiB start (256 KiB at least) cost 287 KB of resident
  // memory per idle connection, 20 KB with these; a connection that moves a
  // large payload doubles its reads up to 16 MiB within a few of them
  // (32 MiB transposes took as long either way, within this host's noise).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (1 << 24) - 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 20);
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, 8 << 10);
  builder.AddChannelArgument(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 4 << 10);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 16 << 20);

  if (limits.memory_quota_bytes > 0) {
    grpc::ResourceQuota quota("gpucompute-server");
    quota.Resize(size_t(limits.memory_quota_bytes));
    builder.SetResourceQuota(quota);
  }
  if (limits.max_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ClampToInt(limits.max_idle_ms));
  }
  if (limits.max_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ClampToInt(limits.max_age_ms));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                               ClampToInt(limits.max_age_grace_ms));
  }
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             ClampToInt(limits.min_ping_interval_ms));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
}

int64_t UnacknowledgedSocketBytes() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int64_t total = 0;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0') continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0, listening = 0;
    socklen_t length = sizeof type;
    if (getsockopt(int(fd), SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) {
      continue;
    }
    length = sizeof listening;
    if (getsockopt(int(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || listening) {
      continue;
    }
    int queued = 0;
    if (ioctl(int(fd), SIOCOUTQ, &queued) == 0 && queued > 0) total += queued;
  }
  closedir(dir);
  return total;
}

int64_t WaitForSocketsToDrain(absl::Time deadline) {
  // Twice in a row: between a socket's queue running empty and gRPC writing
  // the rest of an answer into it, the queue reads 0 for an instant.
  int empty_in_a_row = 0;
  for (;;) {
    const int64_t held = UnacknowledgedSocketBytes();
    empty_in_a_row = held == 0 ? empty_in_a_row + 1 : 0;
    if (empty_in_a_row == 2 || absl::Now() >= deadline) return held;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace gpucompute::server
