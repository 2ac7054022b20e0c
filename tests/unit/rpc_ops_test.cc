// The `op` label of every rpc comes from the service descriptor: each rpc
// has one, the compute ops are marked, and the labels dashboards select on
// are kept.
#include "server/grpc/rpc_ops.h"

#include <set>
#include <string>

#include "gpucompute/v1/compute.grpc.pb.h"
#include "gtest/gtest.h"

namespace gpucompute::server {
namespace {

TEST(RpcOps, EveryRpcHasALabelAndOnlyMatMulTransposeAndReduceAreCompute) {
  const google::protobuf::ServiceDescriptor* service = &ComputeServiceDescriptor();
  std::set<std::string> compute;
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* method = service->method(i);
    const std::string& rpc = method->name();
    const RpcOp op = RpcOpFor(rpc);
    EXPECT_FALSE(op.label.empty()) << rpc;
    // A compute op answers with an ExecutionReport; one missing from
    // kernels::kAllOps would get no batch-size and bytes histograms.
    bool reports = false;
    for (int f = 0; f < method->output_type()->field_count(); ++f) {
      const google::protobuf::Descriptor* type = method->output_type()->field(f)->message_type();
      reports |= type != nullptr && type->name() == "ExecutionReport";
    }
    EXPECT_EQ(op.compute.has_value(), reports) << rpc;
    if (op.compute.has_value()) {
      compute.insert(rpc);
      EXPECT_EQ(op.label, kernels::OpName(*op.compute)) << rpc;
    }
  }
  EXPECT_EQ(compute, (std::set<std::string>{"MatMul", "Transpose", "Reduce"}));
}

TEST(RpcOps, LabelsAreSnakeCaseExceptThoseDashboardsKnow) {
  EXPECT_EQ(RpcOpFor("ListTensors").label, "list_tensors");
  EXPECT_EQ(RpcOpFor("ReleaseTensors").label, "release_tensors");
  EXPECT_EQ(RpcOpFor("Profile").label, "profile");
  EXPECT_EQ(RpcOpFor("MatMul").label, "matmul");
  EXPECT_EQ(RpcOpFor("GetServerInfo").label, "server_info");
  for (const char* rpc : {"RegisterSharedMemory", "UnregisterSharedMemory", "ListSharedMemory"}) {
    EXPECT_EQ(RpcOpFor(rpc).label, "shared_memory") << rpc;
  }
  EXPECT_EQ(SnakeCase("GetFooBar"), "get_foo_bar");
  EXPECT_EQ(SnakeCase("Upload"), "upload");
}

TEST(RpcOpsDeathTest, AnRpcTheServiceLacksIsAnError) {
  EXPECT_DEATH(RpcOpFor("NoSuchRpc"), "no rpc NoSuchRpc");
}

}  // namespace
}  // namespace gpucompute::server
