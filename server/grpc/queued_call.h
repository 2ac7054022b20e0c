// One compute call served from a completion queue (compute_queues.h): what
// CallReactor is to a call gRPC runs on its callback threads. The compute
// rpcs are generic calls there (their request message is read, not handed
// over, so that a call without one is still answered INVALID_ARGUMENT).
// gRPC reports the call's arrival, its message, its answer's sending and its
// end as events on the queue it was asked for on, and one thread serves
// that queue, so the call's bookkeeping needs no lock.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gpucompute/kernels/problem.h"
#include "server/grpc/call_record.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

class QueuedCall {
 public:
  // What a queue event says about its call.
  enum class Event { kArrived, kRead, kAnswerSent, kDone };
  // The tag of each event: the queue's thread finds the call and the event
  // in it.
  struct Tag {
    QueuedCall* call;
    Event event;
  };

  QueuedCall() { context_.AsyncNotifyWhenDone(&done_); }
  QueuedCall(const QueuedCall&) = delete;
  QueuedCall& operator=(const QueuedCall&) = delete;

  grpc::GenericServerContext* context() { return &context_; }
  grpc::GenericServerAsyncReaderWriter* stream() { return &stream_; }
  void* arrived_tag() { return &arrived_; }

  // The call arrived for `op`: its request message is read (the kRead
  // event).
  void Read(kernels::Op op) {
    op_ = op;
    stream_.Read(&request_, &read_);
  }
  // The message was read (or found missing): the call is counted from now
  // on, as a callback call is from its handler on.
  void Begin(Metrics& metrics, RpcOp rpc, CallCounts& counts) {
    record_.emplace(&context_, metrics, rpc, counts);
  }
  // A call for no compute rpc: answered as gRPC answers a call for an rpc
  // it does not know, and not counted.
  void Refuse(grpc::Status status) { stream_.Finish(status, &answer_sent_); }

  kernels::Op op() const { return op_; }
  // The request message; not Valid() when the call had none.
  const grpc::ByteBuffer* request() const { return &request_; }
  grpc::ByteBuffer* response() { return &response_; }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return record_->cancelled(); }
  absl::Time received() const { return record_->received(); }
  absl::Time deadline() const { return record_->deadline(); }

  // Records the outcome, then answers the client with response() (when
  // OK); called exactly once per call that began, from any thread.
  void Complete(absl::Status status, RequestLabels labels = {}, StageLatencies latencies = {}) {
    const grpc::Status answer =
        ToGrpcStatus(record_->End(std::move(status), std::move(labels), latencies));
    completed_.store(true, std::memory_order_release);
    if (answer.ok()) {
      stream_.WriteAndFinish(response_, grpc::WriteOptions(), answer, &answer_sent_);
    } else {
      stream_.Finish(answer, &answer_sent_);
    }
  }

  // The answer went out (or failed), or gRPC is done with the call; on the
  // call's queue thread. True when both happened: the caller deletes the
  // call, which counts it in the metrics.
  bool Handle(Event event) {
    if (event == Event::kDone && context_.IsCancelled() && record_) record_->Cancel();
    if (--events_left_ > 0) return false;
    // gRPC's queue already orders the answering thread's writes (the
    // response, the record) before this; the acquire says so where a race
    // detector can see it, as the call is about to be deleted.
    (void)completed_.load(std::memory_order_acquire);
    return true;
  }

 private:
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_{&context_};
  kernels::Op op_ = kernels::Op::kMatMul;
  grpc::ByteBuffer request_, response_;
  std::optional<CallRecord> record_;
  Tag arrived_{this, Event::kArrived};
  Tag read_{this, Event::kRead};
  Tag answer_sent_{this, Event::kAnswerSent};
  Tag done_{this, Event::kDone};
  // The answer's sending and the call's end; only the queue's thread counts.
  int events_left_ = 2;
  // Set by Complete, on whichever thread answers.
  std::atomic<bool> completed_{false};
};

}  // namespace gpucompute::server
