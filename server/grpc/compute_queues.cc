// Serving the compute calls from completion queues (compute_queues.h).
#include "server/grpc/compute_queues.h"

#include "server/grpc/compute_service.h"
#include "server/grpc/queued_call.h"

namespace gpucompute::server {
namespace {

// Calls each queue keeps asked for. gRPC hands a new call to its
// connection's queue when that queue has one asked for, else to the next
// queue that has: few per queue spread one busy connection's calls over
// the threads instead of lining them up on one.
constexpr int kCallsAskedPerQueue = 4;

}  // namespace

ComputeQueues::~ComputeQueues() { Stop(); }

void ComputeQueues::AddTo(grpc::ServerBuilder& builder) {
  builder.RegisterAsyncGenericService(&generic_);
  for (int i = 0; i < count_; ++i) queues_.push_back(builder.AddCompletionQueue());
}

void ComputeQueues::Start() {
  for (auto& queue : queues_) threads_.emplace_back([this, q = queue.get()] { Serve(q); });
}

void ComputeQueues::Stop() {
  if (threads_.empty()) {
    // The server never started (a start-up failure): nothing was asked for
    // on the queues, and destroying them shuts them down.
    queues_.clear();
    return;
  }
  for (auto& queue : queues_) queue->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  queues_.clear();
}

void ComputeQueues::Await(grpc::ServerCompletionQueue* queue) {
  auto* call = new QueuedCall;
  generic_.RequestCall(call->context(), call->stream(), queue, queue, call->arrived_tag());
}

void ComputeQueues::Serve(grpc::ServerCompletionQueue* queue) {
  for (int i = 0; i < kCallsAskedPerQueue; ++i) Await(queue);
  void* tag;
  bool ok;
  while (queue->Next(&tag, &ok)) {
    auto* event = static_cast<QueuedCall::Tag*>(tag);
    QueuedCall* call = event->call;
    switch (event->event) {
      case QueuedCall::Event::kArrived:
        if (!ok) {  // the server is shutting down: no call came
          delete call;
          break;
        }
        Await(queue);
        service_.BeginQueued(call);
        break;
      case QueuedCall::Event::kRead:
        // Not ok: the call ended without a message; the service says so.
        service_.ServeQueued(call);
        break;
      case QueuedCall::Event::kAnswerSent:
      case QueuedCall::Event::kDone:
        if (call->Handle(event->event)) delete call;
        break;
    }
  }
}

}  // namespace gpucompute::server
