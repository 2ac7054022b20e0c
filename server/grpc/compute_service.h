// The gRPC Compute service (callback API). Handlers parse and validate on
// the gRPC thread, hand the work to the engine, and finish the call from the
// device worker: no gRPC thread ever waits for compute. Every call is
// counted in the metrics exactly once, with the status it finished with.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "gpucompute/v1/compute.grpc.pb.h"
#include "server/engine/compute_engine.h"
#include "server/engine/host_buffers.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_transfers.h"
#include "server/grpc/auth.h"
#include "server/grpc/call_record.h"
#include "server/grpc/tensor_streams.h"
#include "server/grpc/validate.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

struct ServiceConfig {
  Limits limits;
  std::string version;
  int profile_warmup = 2;
  int profile_repetitions = 10;
  // Host memory kept for reuse by large response payloads.
  int64_t host_buffer_pool_bytes = int64_t{2} << 30;
  // MatMul, Transpose and Reduce are served from completion queues
  // (compute_queues.h) instead of gRPC's callback threads.
  bool compute_calls_on_queues = false;
};

class CallReactor;
class QueuedCall;

// Every method takes its messages as raw bytes (grpc::ByteBuffer). The
// compute calls and the tensor streams read their payloads from the
// transport's buffers (see proto/wire/compute_wire.h); the others parse their
// protobuf messages themselves (CallReactor::Parse), so that a call without a
// message is answered INVALID_ARGUMENT and counted, where gRPC's generated
// handler answers it UNIMPLEMENTED with an empty message. The control calls
// (server/grpc/control_calls.h) are registered from their table by the
// constructor, not here. Served from completion queues (ComputeQueues), the
// compute calls are unregistered by the constructor and arrive as generic
// calls.
using RawComputeService =
    v1::Compute::WithRawCallbackMethod_MatMul<v1::Compute::WithRawCallbackMethod_Transpose<
        v1::Compute::WithRawCallbackMethod_Reduce<v1::Compute::WithRawCallbackMethod_Profile<
            v1::Compute::WithRawCallbackMethod_Upload<v1::Compute::WithRawCallbackMethod_Download<
                v1::Compute::WithRawCallbackMethod_Echo<v1::Compute::Service>>>>>>>;

class ComputeService final : public RawComputeService {
 public:
  // `auth` (optional) must outlive the service. Until Activate, every call
  // gets UNAVAILABLE: the server listens while its devices are opened so
  // that health checks can report NOT_SERVING.
  ComputeService(const kernels::Registry& registry, ServiceConfig config, Metrics& metrics,
                 const BearerTokenAuth* auth);

  // Starts serving on opened devices; call once. `engine`, `transfers`
  // (tensor uploads and downloads; null: none) and `regions` (shared memory;
  // null: off, FAILED_PRECONDITION naming --allow_shared_memory) must
  // outlive the server.
  void Activate(ComputeEngine& engine, TensorTransfers* transfers = nullptr,
                SharedMemoryRegistry* regions = nullptr);

  // Calls begun so far, and calls not yet finished: the server is idle while
  // the first stays the same and the second is 0.
  int64_t calls_started() const { return calls_.started.Value(); }
  int64_t calls_in_flight() const { return calls_.in_flight(); }
  // Calls done so far: answered in full, and cancelled (see CallCounts).
  int64_t calls_answered() const { return calls_.answered.Value(); }
  int64_t calls_cancelled() const { return calls_.cancelled.Value(); }
  // Shutdown: from now on every new call is refused with UNAVAILABLE, while
  // the calls already in flight go on.
  void StopAdmitting() { draining_.store(true, std::memory_order_release); }
  // Frees the response buffers kept for reuse; returns their bytes.
  int64_t ReleaseRetainedBuffers() { return buffers_.Trim(); }

  // MatMul, Transpose and Reduce take their messages as raw bytes (see
  // proto/wire/compute_wire.h): the payloads are read from and written to
  // the transport's buffers without protobuf copies.
  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Reduce(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // The same calls served from completion queues (ComputeQueues): a
  // generic call arrived (one for another rpc is refused UNIMPLEMENTED);
  // its request message was read, or found missing.
  void BeginQueued(QueuedCall* call);
  void ServeQueued(QueuedCall* call);
  grpc::ServerUnaryReactor* Profile(grpc::CallbackServerContext* ctx,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;
  // A round trip that does no work (server/grpc/echo_call.cc): the request's
  // payload is skipped where it lies, and the answer's zero bytes are one
  // static block referenced as often as needed, so the call costs what gRPC
  // and the service's admission cost for its bytes.
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  // Tensors (server/grpc/tensor_upload.cc, tensor_download.cc). Upload and
  // Download take raw bytes too: Upload's chunks are written to the tensor
  // from the transport's buffers, and each Download chunk is sent from the
  // buffer it was read into.
  grpc::ServerReadReactor<grpc::ByteBuffer>* Upload(grpc::CallbackServerContext* ctx,
                                                    grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Download(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;

 private:
  struct ComputeState;

  // The token, then readiness: OK, or why the call is refused.
  absl::Status Readiness(grpc::ServerContextBase* ctx) const;
  // Checks Readiness. Returns the engine, or null after completing the call
  // (a CallReactor or a QueuedCall) with the reason.
  template <typename Call>
  ComputeEngine* Admit(grpc::ServerContextBase* ctx, Call* call) const;
  StreamContext stream_context();
  // Registers each control call's handler under its rpc.
  void RegisterControlCalls();
  // Leaves MatMul, Transpose and Reduce to the server's generic service.
  void UnregisterComputeCalls();

  // Shared path of MatMul, Transpose and Reduce, whichever API serves them.
  template <typename Call>
  void ServeCompute(grpc::ServerContextBase* ctx, Call* call, kernels::Op op,
                    const grpc::ByteBuffer* request, grpc::ByteBuffer* response);
  // Its callback API form.
  grpc::ServerUnaryReactor* RunCompute(grpc::CallbackServerContext* ctx, kernels::Op op,
                                       const grpc::ByteBuffer* request, grpc::ByteBuffer* response);

  const kernels::Registry& registry_;
  const ServiceConfig config_;
  Metrics& metrics_;
  HostBufferPool buffers_{config_.host_buffer_pool_bytes};
  const BearerTokenAuth* const auth_;
  std::atomic<ComputeEngine*> engine_{nullptr};
  std::atomic<TensorTransfers*> transfers_{nullptr};
  std::atomic<SharedMemoryRegistry*> regions_{nullptr};
  CallCounts calls_;
  std::atomic<bool> draining_{false};
};

}  // namespace gpucompute::server
