// The gRPC Compute service (callback API). Handlers validate on the gRPC
// thread, hand the work to the scheduler, and finish the call from the
// device worker: no gRPC thread ever waits for compute.
#pragma once

#include <string>

#include "gpucompute/v1/compute.grpc.pb.h"
#include "server/scheduler.h"
#include "server/select.h"
#include "server/validate.h"

namespace gpucompute::server {

struct ServiceConfig {
  Limits limits;
  std::string version;
  kernels::Backend backend = kernels::Backend::kCpu;
  int profile_warmup = 2;
  int profile_repetitions = 10;
};

class ComputeService final : public v1::Compute::CallbackService {
 public:
  ComputeService(const kernels::Registry& registry, Scheduler& scheduler,
                 VariantSelector& selector, ServiceConfig config);

  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* ctx, const v1::MatMulRequest* req,
                                   v1::MatMulResponse* resp) override;
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* ctx,
                                      const v1::TransposeRequest* req,
                                      v1::TransposeResponse* resp) override;
  grpc::ServerUnaryReactor* Reduce(grpc::CallbackServerContext* ctx, const v1::ReduceRequest* req,
                                   v1::ReduceResponse* resp) override;
  grpc::ServerUnaryReactor* Profile(grpc::CallbackServerContext* ctx,
                                    const v1::ProfileRequest* req,
                                    v1::ProfileResponse* resp) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx,
                                          const v1::ServerInfoRequest* req,
                                          v1::ServerInfo* resp) override;

 private:
  // Shared path of MatMul, Transpose and Reduce.
  grpc::ServerUnaryReactor* RunCompute(grpc::CallbackServerContext* ctx,
                                       absl::StatusOr<kernels::Problem> problem,
                                       const std::string& variant_name, bool allow_reduced,
                                       const v1::Matrix& a, const v1::Matrix* b,
                                       v1::Matrix* out, v1::ExecutionReport* report);

  const kernels::Registry& registry_;
  Scheduler& scheduler_;
  VariantSelector& selector_;
  const ServiceConfig config_;
};

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace gpucompute::server
