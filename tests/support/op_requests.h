// One compute request of any op sent through the Compute stub, and what
// came back: for tests that send every op the same way.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "gpucompute/kernels/problem.h"
#include "gpucompute/v1/compute.grpc.pb.h"

namespace gpucompute::testing {

struct OpRequest {
  kernels::Op op = kernels::Op::kMatMul;
  v1::Matrix a, b;  // b: MatMul only
  v1::ReduceOp reduce_op = v1::REDUCE_OP_SUM;
  v1::ReduceAxis axis = v1::REDUCE_AXIS_ALL;
  std::string variant;
  bool keep = false;  // the result stays on the server as a new tensor
  // Where the result goes instead, when its region is named.
  v1::SharedMemorySlice out_slice;
};

// The output placement `r` asks for, if any.
inline bool SetOutput(const OpRequest& r, v1::OutputPlacement* out) {
  if (r.keep) out->set_keep(true);
  if (!r.out_slice.region().empty()) *out->mutable_shared_memory() = r.out_slice;
  return r.keep || !r.out_slice.region().empty();
}

struct OpAnswer {
  grpc::Status status;
  v1::Matrix output;
  v1::ExecutionReport report;
};

// Sends `r` with `ctx` (its deadline, its cancellation) and waits.
inline OpAnswer SendOp(v1::Compute::Stub& stub, const OpRequest& r, grpc::ClientContext& ctx) {
  OpAnswer answer;
  if (r.op == kernels::Op::kMatMul) {
    v1::MatMulRequest req;
    *req.mutable_a() = r.a;
    *req.mutable_b() = r.b;
    req.set_variant(r.variant);
    if (v1::OutputPlacement out; SetOutput(r, &out)) *req.mutable_output() = out;
    v1::MatMulResponse resp;
    answer.status = stub.MatMul(&ctx, req, &resp);
    answer.output = resp.c();
    answer.report = resp.report();
  } else if (r.op == kernels::Op::kTranspose) {
    v1::TransposeRequest req;
    *req.mutable_input() = r.a;
    req.set_variant(r.variant);
    if (v1::OutputPlacement out; SetOutput(r, &out)) *req.mutable_output() = out;
    v1::TransposeResponse resp;
    answer.status = stub.Transpose(&ctx, req, &resp);
    answer.output = resp.output();
    answer.report = resp.report();
  } else {
    v1::ReduceRequest req;
    *req.mutable_input() = r.a;
    req.set_op(r.reduce_op);
    req.set_axis(r.axis);
    req.set_variant(r.variant);
    if (v1::OutputPlacement out; SetOutput(r, &out)) *req.mutable_output() = out;
    v1::ReduceResponse resp;
    answer.status = stub.Reduce(&ctx, req, &resp);
    answer.output = resp.output();
    answer.report = resp.report();
  }
  return answer;
}

}  // namespace gpucompute::testing
