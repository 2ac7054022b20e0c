// The gRPC server: the Compute service, the standard health service and
// reflection, on every --listen address, with the transport's limits.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "server/grpc/compute_queues.h"
#include "server/grpc/compute_service.h"
#include "server/server_flags.h"

namespace gpucompute::server {

// Before binding: stale socket files removed (or a live server's refused),
// and a warning that --unix_socket_mode cannot cover abstract sockets.
absl::Status PrepareListeners(const ServingOptions& serving);

// Binds every address (each listener's port is set) and starts serving
// `service`, health saying NOT_SERVING until the caller says otherwise;
// `queues` (optional, outliving the server) serve its compute calls. On
// failure nothing is left listening and no socket file is left behind.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(ServingOptions& serving,
                                                              int64_t max_matrix_bytes,
                                                              ComputeService& service,
                                                              ComputeQueues* queues);

// Health says SERVING, for the Compute service and the server as a whole.
void MarkServing(grpc::Server& server);

}  // namespace gpucompute::server
