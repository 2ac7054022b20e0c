// An in-process Compute server for client tests: real (naive) arithmetic so
// results can be checked, plus hooks to observe metadata and inject faults.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <grpcpp/server.h>

#include "gpucompute/v1/compute.grpc.pb.h"

namespace gpucompute::testing {

class FakeComputeService final : public v1::Compute::Service {
 public:
  grpc::Status MatMul(grpc::ServerContext* context, const v1::MatMulRequest* request,
                      v1::MatMulResponse* response) override;
  grpc::Status Transpose(grpc::ServerContext* context, const v1::TransposeRequest* request,
                         v1::TransposeResponse* response) override;
  grpc::Status Reduce(grpc::ServerContext* context, const v1::ReduceRequest* request,
                      v1::ReduceResponse* response) override;
  grpc::Status Profile(grpc::ServerContext* context, const v1::ProfileRequest* request,
                       v1::ProfileResponse* response) override;
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::ServerInfoRequest* request,
                             v1::ServerInfo* response) override;
  // Answers response_bytes zero bytes, as the server does.
  grpc::Status Echo(grpc::ServerContext*, const v1::EchoRequest* request,
                    v1::EchoResponse* response) override {
    response->mutable_payload()->resize(size_t(request->response_bytes()));
    return grpc::Status::OK;
  }

  // The "authorization" metadata of the latest call ("" when absent).
  std::string last_authorization() const;
  // The latest Profile request (empty before the first).
  v1::ProfileRequest last_profile_request() const;
  // Profile answers with `response` from now on instead of its two canned rows.
  void set_profile_response(const v1::ProfileResponse& response);
  // GetServerInfo fails with `status` from now on.
  void set_server_info_status(const grpc::Status& status);

 private:
  void Record(grpc::ServerContext* context);
  mutable std::mutex mu_;
  std::string last_authorization_;
  v1::ProfileRequest last_profile_request_;
  std::optional<v1::ProfileResponse> profile_response_;
  std::optional<grpc::Status> server_info_status_;
};

// A server on 127.0.0.1 with a free port, the default health service
// enabled and 2 GiB message limits.
struct FakeServer {
  FakeComputeService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // "127.0.0.1:PORT"

  static std::unique_ptr<FakeServer> Start();
  ~FakeServer();
};

}  // namespace gpucompute::testing
