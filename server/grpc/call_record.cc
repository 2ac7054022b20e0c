#include "server/grpc/call_record.h"

#include "absl/strings/str_cat.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

absl::Time DeadlineOf(const grpc::ServerContextBase* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

CallRecord::CallRecord(grpc::ServerContextBase* ctx, Metrics& metrics, RpcOp op, CallCounts& counts)
    : ctx_(ctx), metrics_(metrics), op_(op), deadline_(DeadlineOf(ctx)), counts_(counts) {
  metrics_.RequestStarted();
  counts_.started.Add();
}

absl::Status CallRecord::AsTheClientSawIt(absl::Time now) const {
  return now >= deadline_ ? absl::DeadlineExceededError("deadline passed")
                          : absl::CancelledError("cancelled by the client");
}

absl::Status CallRecord::End(absl::Status status, RequestLabels labels, StageLatencies latencies) {
  const absl::Time now = absl::Now();
  if (latencies.total_us < 0) latencies.total_us = absl::ToInt64Microseconds(now - received_);
  if (cancelled_->load() || ctx_->IsCancelled()) {
    status = AsTheClientSawIt(now);
  } else if ((status.ok() || status.code() == absl::StatusCode::kCancelled) && now >= deadline_) {
    // The work stops itself once the deadline passes ("abandoned"): that is
    // the deadline, not a cancellation.
    status = absl::DeadlineExceededError("deadline passed before the response was ready");
  }
  ended_ = true;
  status_ = status;
  labels_ = std::move(labels);
  latencies_ = latencies;
  return status;
}

CallRecord::~CallRecord() {
  // gRPC's view is final once the call is done: cancelled means the answer
  // did not reach the client as sent (a call cancelled before its message
  // arrived was answered "no request message", which the client never saw).
  const bool cancelled = cancelled_->load() || ctx_->IsCancelled() || !ended_;
  const absl::Status status = cancelled ? AsTheClientSawIt(absl::Now()) : status_;
  // The access log reads the variant after the metrics took the labels.
  const std::string variant = AccessLogEnabled() ? labels_.variant : std::string();
  metrics_.RequestFinished(op_, std::move(labels_), status.code(), latencies_);
  (cancelled ? counts_.cancelled : counts_.answered).Add();
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled &&
      status.code() != absl::StatusCode::kDeadlineExceeded) {
    LogWarning(absl::StrCat(op_.label, " from ", ctx_->peer(), ": ",
                            absl::StatusCodeToString(status.code()), ": ", status.message()));
  }
  if (AccessLogEnabled()) {
    LogAccess(absl::StrCat(
        ctx_->peer(), " ", op_.label, " ", absl::StatusCodeToString(status.code()),
        " variant=", variant.empty() ? "none" : variant, " total_us=", latencies_.total_us,
        latencies_.batch_size > 1 ? absl::StrCat(" batch=", latencies_.batch_size) : ""));
  }
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace gpucompute::server
