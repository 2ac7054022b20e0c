// Serving the compute calls (MatMul, Transpose, Reduce) from completion
// queues, one thread per queue, instead of gRPC's callback threads
// (--grpc_queues). gRPC 1.51 runs every callback of a server on one shared
// queue polled by half the cores' threads, which contend for it; a queue per
// thread takes that shared lock off the small-request path. The other calls
// keep the callback API; the compute calls reach the queues as generic
// calls (see queued_call.h). Measured on an H100 (bench/results/
// small-requests.md), it served the smallest calls and one connection's
// calls faster and the MatMuls of many connections no faster, in smaller
// batches: so the callback threads stay the default.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>
#include <vector>

namespace gpucompute::server {

class ComputeService;

class ComputeQueues {
 public:
  // `count` queues, each with its thread once Start is called; `service`
  // must outlive this.
  ComputeQueues(ComputeService& service, int count) : service_(service), count_(count) {}
  // Stop, if it was not called.
  ~ComputeQueues();
  ComputeQueues(const ComputeQueues&) = delete;
  ComputeQueues& operator=(const ComputeQueues&) = delete;

  // Adds the queues, and the generic service they serve, to the server
  // being built (whose ComputeService was configured for them).
  void AddTo(grpc::ServerBuilder& builder);
  // After the server started: each thread asks for calls on its queue.
  void Start();
  // After the server's Shutdown (gRPC requires that order): shuts the
  // queues, lets each thread take their last events and joins it.
  void Stop();

 private:
  void Serve(grpc::ServerCompletionQueue* queue);
  // Asks gRPC for the next call on `queue`.
  void Await(grpc::ServerCompletionQueue* queue);

  ComputeService& service_;
  const int count_;
  grpc::AsyncGenericService generic_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
};

}  // namespace gpucompute::server
