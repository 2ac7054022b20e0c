// A unary call through the generic stub, completed on the calling thread,
// and the wait for a completion queue's next event that it uses.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <string>

namespace gpucompute::internal {

// The queue's next event into `tag` and `ok`, as CompletionQueue::Next:
// false once the queue is shut down and drained. `busy_poll`: poll for it
// without sleeping (one busy core while waiting) instead of sleeping in Next.
bool NextEvent(grpc::CompletionQueue& cq, void** tag, bool* ok, bool busy_poll);

// Runs the call on a completion queue of this thread's own, as gRPC's
// synchronous API does: the thread that waits is the one that reads the
// answer, so no gRPC thread has to wake it (a callback call finishes on one
// of gRPC's threads, which then hands the status over). `busy_poll`: poll
// the queue without sleeping until the answer is in (one busy core for the
// call's duration), leaving a sleeping thread's wake-up out of the latency.
grpc::Status UnaryOnThisThread(grpc::GenericStub& stub, grpc::ClientContext* context,
                               const std::string& method, const grpc::ByteBuffer& request,
                               grpc::ByteBuffer* response, bool busy_poll);

}  // namespace gpucompute::internal
