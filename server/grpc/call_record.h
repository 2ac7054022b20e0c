// One call's bookkeeping from its arrival to its end, shared by the unary
// and streaming reactors: counted in flight while it lives, and when it is
// done (its reactor's OnDone) counted once in the metrics with the status
// its client saw, logged when it failed, and written to the access log.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/ops/metrics.h"
#include "server/ops/striped_counter.h"

namespace gpucompute::server {

// The service's tally of its calls, kept by every CallRecord. Striped, as
// the metrics are: every call adds to it on its way in and out.
struct CallCounts {
  StripedCounter started;
  // Calls done whose answer gRPC sent in full, and calls done without it:
  // cancelled by the client, past their deadline, cut off by the server's
  // shutdown, or on a connection that broke.
  StripedCounter answered;
  StripedCounter cancelled;
  // Started and not yet done.
  int64_t in_flight() const { return BegunLessEnded(started, {&answered, &cancelled}); }
};

class CallRecord {
 public:
  CallRecord(grpc::ServerContextBase* ctx, Metrics& metrics, RpcOp op, CallCounts& counts);
  // The call is done: its reactor's OnDone deletes the record. Counts it
  // with the status End returned, or as the client saw it when gRPC reports
  // the call cancelled (the client left, its deadline passed, or the answer
  // never went out), whatever End decided.
  ~CallRecord();
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;

  // The reactor's OnCancel: queued work sees it and is abandoned.
  void Cancel() { cancelled_->store(true); }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }
  absl::Time received() const { return received_; }
  absl::Time deadline() const { return deadline_; }

  // Decides once the status to answer with, kept for the count: a call the
  // client gave up on ends as the client sees it (CANCELLED or
  // DEADLINE_EXCEEDED), whatever the work's own outcome was. `labels` say
  // what ran where (the variant, dtype and device; "" when not known).
  absl::Status End(absl::Status status, RequestLabels labels = {}, StageLatencies latencies = {});

 private:
  // A call gRPC reports cancelled ends as its client saw it.
  absl::Status AsTheClientSawIt(absl::Time now) const;

  grpc::ServerContextBase* const ctx_;
  Metrics& metrics_;
  const RpcOp op_;
  const absl::Time received_ = absl::Now();
  const absl::Time deadline_;
  CallCounts& counts_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
  // Set by End.
  bool ended_ = false;
  absl::Status status_;
  RequestLabels labels_;
  StageLatencies latencies_;
};

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpucompute::server
