#include "server/grpc/call_record.h"

#include "absl/strings/str_cat.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

CallRecord::CallRecord(grpc::CallbackServerContext* ctx, Metrics& metrics, RpcOp op,
                       std::atomic<int64_t>& started, std::atomic<int64_t>& in_flight)
    : ctx_(ctx), metrics_(metrics), op_(op), deadline_(DeadlineOf(ctx)), in_flight_(in_flight) {
  metrics_.RequestStarted();
  started.fetch_add(1, std::memory_order_relaxed);
  in_flight_.fetch_add(1, std::memory_order_relaxed);
}

CallRecord::~CallRecord() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

absl::Status CallRecord::End(absl::Status status, const std::string& variant,
                             StageLatencies latencies) {
  const absl::Time now = absl::Now();
  if (latencies.total_us < 0) latencies.total_us = absl::ToInt64Microseconds(now - received_);
  if (cancelled_->load() || ctx_->IsCancelled()) {
    status = now >= deadline_ ? absl::DeadlineExceededError("deadline passed")
                              : absl::CancelledError("cancelled by the client");
  } else if ((status.ok() || status.code() == absl::StatusCode::kCancelled) && now >= deadline_) {
    // The work stops itself once the deadline passes ("abandoned"): that is
    // the deadline, not a cancellation.
    status = absl::DeadlineExceededError("deadline passed before the response was ready");
  }
  metrics_.RequestFinished(op_, variant, status.code(), latencies);
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled &&
      status.code() != absl::StatusCode::kDeadlineExceeded) {
    LogWarning(absl::StrCat(RpcOpName(op_), " from ", ctx_->peer(), ": ",
                            absl::StatusCodeToString(status.code()), ": ", status.message()));
  }
  if (AccessLogEnabled()) {
    LogAccess(absl::StrCat(
        ctx_->peer(), " ", RpcOpName(op_), " ", absl::StatusCodeToString(status.code()),
        " variant=", variant.empty() ? "none" : variant, " total_us=", latencies.total_us,
        latencies.batch_size > 1 ? absl::StrCat(" batch=", latencies.batch_size) : ""));
  }
  return status;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace gpucompute::server
