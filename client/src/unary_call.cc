#include "unary_call.h"

#include <memory>

namespace gpucompute::internal {

bool NextEvent(grpc::CompletionQueue& cq, void** tag, bool* ok, bool busy_poll) {
  if (!busy_poll) return cq.Next(tag, ok);
  for (;;) {
    switch (cq.AsyncNext(tag, ok, gpr_time_0(GPR_CLOCK_MONOTONIC))) {
      case grpc::CompletionQueue::GOT_EVENT: return true;
      case grpc::CompletionQueue::SHUTDOWN: return false;
      case grpc::CompletionQueue::TIMEOUT: break;
    }
  }
}

grpc::Status UnaryOnThisThread(grpc::GenericStub& stub, grpc::ClientContext* context,
                               const std::string& method, const grpc::ByteBuffer& request,
                               grpc::ByteBuffer* response, bool busy_poll) {
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(context, method, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(response, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  NextEvent(cq, &tag, &ok, busy_poll);
  // Finish is the only operation, so `tag` is its; a queue must be empty
  // and shut down before it is destroyed.
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

}  // namespace gpucompute::internal
