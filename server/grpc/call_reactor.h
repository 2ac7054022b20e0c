// The reactor of ComputeService's unary calls, shared by the files that
// implement them (compute_service.cc, shared_memory_calls.cc).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/grpc/call_record.h"
#include "server/grpc/compute_service.h"

namespace gpucompute::server {

// A unary reactor that records cancellation so queued work can be abandoned,
// and counts its call in the metrics (and the access log) when it finishes.
class ComputeService::CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(grpc::CallbackServerContext* ctx, Metrics& metrics, RpcOp op,
              std::atomic<int64_t>& started, std::atomic<int64_t>& in_flight)
      : record_(ctx, metrics, op, started, in_flight) {}
  void OnCancel() override { record_.Cancel(); }
  void OnDone() override { delete this; }
  // Both reactions above are trivial (an atomic store, a delete), so gRPC
  // may run them on the thread that ends the call, as it does for its own
  // finish-only reactors, instead of waking an executor thread per call
  // (one futex wake and a context switch on every small request).
  bool InternalInlineable() override { return true; }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return record_.cancelled(); }
  absl::Time received() const { return record_.received(); }
  absl::Time deadline() const { return record_.deadline(); }

  // Records the outcome, then answers the client; called exactly once per
  // call. `variant` is the one that ran or was chosen ("" when none was).
  void Complete(absl::Status status, const std::string& variant = "",
                StageLatencies latencies = {}) {
    Finish(ToGrpcStatus(record_.End(std::move(status), variant, latencies)));
  }

 private:
  CallRecord record_;
};

}  // namespace gpucompute::server
