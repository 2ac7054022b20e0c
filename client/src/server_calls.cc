// Questions about the server: its info, a Profile of the variants, and its health.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client_core.h"
#include "gpucompute/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "unary_call.h"

namespace gpucompute {

const char* HealthStatusName(HealthStatus status) {
  switch (status) {
    case HealthStatus::kServing: return "SERVING";
    case HealthStatus::kNotServing: return "NOT_SERVING";
    case HealthStatus::kServiceUnknown: return "SERVICE_UNKNOWN";
    case HealthStatus::kUnknown: break;
  }
  return "UNKNOWN";
}

absl::StatusOr<v1::ProfileResponse> Client::Profile(const v1::ProfileRequest& request) const {
  v1::ProfileResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("Profile", stub_->Profile(&context, request, &response)); !st.ok()) {
    return st;
  }
  return response;
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo() const {
  v1::ServerInfo response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("GetServerInfo",
                               stub_->GetServerInfo(&context, v1::ServerInfoRequest(), &response));
      !st.ok()) {
    return st;
  }
  return response;
}

absl::StatusOr<int64_t> Client::Echo(int64_t response_bytes, int64_t payload_bytes) const {
  // The server names a bad response_bytes itself; a payload size is the
  // client's own to refuse.
  if (payload_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload_bytes: ", payload_bytes, " is negative (0 or more)"));
  }
  v1::EchoRequest request;
  request.set_response_bytes(response_bytes);
  request.mutable_payload()->resize(size_t(payload_bytes));
  v1::EchoResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  if (absl::Status st = Finish("Echo", stub_->Echo(&context, request, &response)); !st.ok()) {
    return st;
  }
  return int64_t(response.payload().size());
}

absl::StatusOr<HealthStatus> Client::Health(const std::string& service) const {
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  Prepare(&context);
  // On a completion queue of this thread's own, as UnaryOnThisThread does
  // for the compute calls, so that busy_poll applies to Health too.
  const std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(core_->channel);
  grpc::CompletionQueue cq;
  const auto call = stub->PrepareAsyncCheck(&context, request, &cq);
  call->StartCall();
  grpc::Status status;
  call->Finish(&response, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  internal::NextEvent(cq, &tag, &ok, core_->busy_poll);
  cq.Shutdown();  // Finish was the only operation; the queue must be drained
  while (cq.Next(&tag, &ok)) {
  }
  if (absl::Status st = Finish("Health", status); !st.ok()) return st;
  // A status this client does not know (a newer server's) reads as UNKNOWN.
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING: return HealthStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING: return HealthStatus::kNotServing;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN:
      return HealthStatus::kServiceUnknown;
    default: return HealthStatus::kUnknown;
  }
}

}  // namespace gpucompute
