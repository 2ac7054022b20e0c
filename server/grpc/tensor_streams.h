// The Upload and Download streams: a tensor's bytes move chunk by chunk
// between the network and the device holding it, through the engine's
// TensorTransfers, so neither the server's host memory nor one gRPC message
// ever holds a whole payload (and no 2 GiB message limit applies).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>

#include "gpucompute/v1/compute.pb.h"
#include "server/engine/host_buffers.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_transfers.h"
#include "server/grpc/call_record.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

// What both streams need from the service: where to count the call, and
// the shared-memory regions (null: the server runs without them).
struct StreamContext {
  Metrics& metrics;
  CallCounts& calls;
  const SharedMemoryRegistry* regions = nullptr;
  HostBufferPool* buffers = nullptr;  // reused payload buffers (Download's chunks)
};

// Bytes of an Upload gathered from its messages before they go to the
// device in one write: few large copies through the staging instead of one
// per message (a client may send 1-byte messages), and the host holds at
// most this plus one message.
inline constexpr int64_t kUploadWriteBytes = int64_t{8} << 20;

// Download's data bytes per message when the request says 0: just under
// 4 MiB, so a client with gRPC's default 4 MiB receive limit reads them.
inline constexpr int64_t kDefaultDownloadChunkBytes = (int64_t{4} << 20) - (int64_t{64} << 10);
// The most data bytes per Download message, whatever the request asks.
inline constexpr int64_t kMaxDownloadChunkBytes = int64_t{64} << 20;

// Starts an Upload; `transfers` null: the server holds no tensors. The
// reactor deletes itself when the call is done.
// Its messages are read as raw UploadRequest bytes; `response` receives the
// TensorInfo's.
grpc::ServerReadReactor<grpc::ByteBuffer>* StartUpload(grpc::CallbackServerContext* ctx,
                                                       grpc::ByteBuffer* response,
                                                       TensorTransfers* transfers,
                                                       const StreamContext& call);

// Starts a Download of `request` (copied); its messages are written as raw
// DownloadResponse bytes.
grpc::ServerWriteReactor<grpc::ByteBuffer>* StartDownload(grpc::CallbackServerContext* ctx,
                                                          const v1::DownloadRequest& request,
                                                          TensorTransfers* transfers,
                                                          const StreamContext& call);

// A stream refused before it began (not serving yet, or unauthenticated).
grpc::ServerReadReactor<grpc::ByteBuffer>* RefuseUpload(grpc::CallbackServerContext* ctx,
                                                        absl::Status status,
                                                        const StreamContext& call);
grpc::ServerWriteReactor<grpc::ByteBuffer>* RefuseDownload(grpc::CallbackServerContext* ctx,
                                                           absl::Status status,
                                                           const StreamContext& call);

}  // namespace gpucompute::server
