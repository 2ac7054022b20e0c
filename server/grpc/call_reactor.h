// The reactor of ComputeService's unary calls, shared by the files that
// implement them (compute_service.cc, control_calls.cc,
// shared_memory_calls.cc).
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "server/grpc/call_record.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

// What a call whose request message never arrived is answered (the client
// half-closed without sending one, or cancelled the call before it came):
// INVALID_ARGUMENT naming the message expected, e.g. "gpucompute.v1.EchoRequest".
inline absl::Status NoRequestMessage(absl::string_view expected_type) {
  return absl::InvalidArgumentError(
      absl::StrCat("request: no request message was received (expected a ", expected_type, ")"));
}

// A unary reactor that records cancellation so queued work can be abandoned,
// and counts its call in the metrics (and the access log) when it is done.
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(grpc::CallbackServerContext* ctx, Metrics& metrics, RpcOp op, CallCounts& counts)
      : record_(ctx, metrics, op, counts) {}
  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }
  // Both reactions above are trivial (an atomic store; the count and a
  // delete), so gRPC may run them on the thread that ends the call, as it
  // does for its own finish-only reactors, instead of waking an executor
  // thread per call (one futex wake and a context switch on every small
  // request).
  bool InternalInlineable() override { return true; }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return record_.cancelled(); }
  absl::Time received() const { return record_.received(); }
  absl::Time deadline() const { return record_.deadline(); }

  // The calls whose messages are protobuf types are registered raw, as
  // bytes: gRPC's generated handler answers a call whose message is missing
  // or unparsable with UNIMPLEMENTED and no message, before any handler (or
  // count) sees it. Parses `bytes` into `request`; false after answering
  // INVALID_ARGUMENT, naming the request.
  template <typename Request>
  bool Parse(const grpc::ByteBuffer* bytes, Request& request) {
    if (!bytes->Valid()) {
      Complete(NoRequestMessage(request.GetTypeName()));
      return false;
    }
    grpc::ByteBuffer copy(*bytes);  // shares the slices; parsing consumes its copy
    if (!grpc::SerializationTraits<Request>::Deserialize(&copy, &request).ok()) {
      Complete(absl::InvalidArgumentError(
          absl::StrCat("request: not a ", request.GetTypeName(), " (unparsable bytes)")));
      return false;
    }
    return true;
  }
  // The response message of a raw call, written into `bytes` when the call
  // ends OK; it lives as long as the reactor.
  template <typename Response>
  Response* Respond(grpc::ByteBuffer* bytes) {
    auto message = std::make_unique<Response>();
    Response* out = message.get();
    response_ = std::move(message);
    response_bytes_ = bytes;
    return out;
  }

  // Records the outcome, then answers the client; called exactly once per
  // call. `labels` say what ran where ("" where not known).
  void Complete(absl::Status status, RequestLabels labels = {}, StageLatencies latencies = {}) {
    if (status.ok() && response_ != nullptr) {
      bool own_buffer = false;
      if (!grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(
               *response_, response_bytes_, &own_buffer)
               .ok()) {
        status = absl::InternalError("response: the message could not be serialized");
      }
    }
    Finish(ToGrpcStatus(record_.End(std::move(status), std::move(labels), latencies)));
  }

 private:
  CallRecord record_;
  std::unique_ptr<google::protobuf::MessageLite> response_;
  grpc::ByteBuffer* response_bytes_ = nullptr;
};

}  // namespace gpucompute::server
