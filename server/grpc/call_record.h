// One call's bookkeeping from its arrival to its answer, shared by the unary
// and streaming reactors: counted in flight while it lives, and at its end
// counted once in the metrics with the status the client sees, logged when
// it failed, and written to the access log.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/ops/metrics.h"

namespace gpucompute::server {

class CallRecord {
 public:
  CallRecord(grpc::CallbackServerContext* ctx, Metrics& metrics, RpcOp op,
             std::atomic<int64_t>& started, std::atomic<int64_t>& in_flight);
  ~CallRecord();  // the call is no longer in flight
  CallRecord(const CallRecord&) = delete;
  CallRecord& operator=(const CallRecord&) = delete;

  // The reactor's OnCancel: queued work sees it and is abandoned.
  void Cancel() { cancelled_->store(true); }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }
  absl::Time received() const { return received_; }
  absl::Time deadline() const { return deadline_; }

  // Records the outcome once and returns the status to answer with: a call
  // the client gave up on ends as the client sees it (CANCELLED or
  // DEADLINE_EXCEEDED), whatever the work's own outcome was. `variant` is
  // the one that ran or was chosen ("" when none was).
  absl::Status End(absl::Status status, const std::string& variant = "",
                   StageLatencies latencies = {});

 private:
  grpc::CallbackServerContext* const ctx_;
  Metrics& metrics_;
  const RpcOp op_;
  const absl::Time received_ = absl::Now();
  const absl::Time deadline_;
  std::atomic<int64_t>& in_flight_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpucompute::server
