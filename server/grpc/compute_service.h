// The gRPC Compute service (callback API). Handlers validate on the gRPC
// thread, hand the work to the scheduler, and finish the call from the
// device worker: no gRPC thread ever waits for compute. Every call is
// counted in the metrics exactly once, with the status it finished with.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "gpucompute/v1/compute.grpc.pb.h"
#include "server/grpc/auth.h"
#include "server/ops/metrics.h"
#include "server/grpc/response_buffers.h"
#include "server/engine/scheduler.h"
#include "server/engine/variant_selector.h"
#include "server/grpc/validate.h"

namespace gpucompute::server {

struct ServiceConfig {
  Limits limits;
  std::string version;
  int profile_warmup = 2;
  int profile_repetitions = 10;
  // Host memory kept for reuse by large response payloads.
  int64_t host_buffer_pool_bytes = int64_t{2} << 30;
};

class ComputeService final
    : public v1::Compute::WithRawCallbackMethod_MatMul<v1::Compute::WithRawCallbackMethod_Transpose<
          v1::Compute::WithRawCallbackMethod_Reduce<v1::Compute::CallbackService>>> {
 public:
  // `auth` (optional) must outlive the service. Until Activate, every call
  // gets UNAVAILABLE: the server listens while its devices are opened so
  // that health checks can report NOT_SERVING.
  ComputeService(const kernels::Registry& registry, ServiceConfig config, Metrics& metrics,
                 const BearerTokenAuth* auth);

  // Starts serving on opened devices; call once. Both must outlive the server.
  void Activate(Scheduler& scheduler, VariantSelector& selector, kernels::Backend backend);

  // MatMul, Transpose and Reduce take their messages as raw bytes (see
  // server/wire.h): the payloads are read from and written to the transport's
  // buffers without protobuf copies.
  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Reduce(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Profile(grpc::CallbackServerContext* ctx,
                                    const v1::ProfileRequest* req,
                                    v1::ProfileResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::ServerInfoRequest* req,
                                          v1::ServerInfo* resp) override;

 private:
  struct Runtime {
    Scheduler* scheduler = nullptr;
    VariantSelector* selector = nullptr;
    kernels::Backend backend = kernels::Backend::kCpu;
  };
  class CallReactor;
  struct ComputeState;

  // Checks the token, then readiness. Returns the runtime, or null after
  // finishing the call with the reason.
  const Runtime* Admit(grpc::CallbackServerContext* ctx, CallReactor* reactor) const;

  // Shared path of MatMul, Transpose and Reduce, after Admit.
  grpc::ServerUnaryReactor* RunCompute(grpc::CallbackServerContext* ctx, CallReactor* reactor,
                                       const Runtime& runtime, kernels::Op op,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response);

  const kernels::Registry& registry_;
  const ServiceConfig config_;
  Metrics& metrics_;
  ResponseBufferPool buffers_{config_.host_buffer_pool_bytes};
  const BearerTokenAuth* const auth_;
  Runtime runtime_storage_;
  std::atomic<const Runtime*> runtime_{nullptr};
};

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpucompute::server
