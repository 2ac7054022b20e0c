#include "server/grpc/compute_request.h"

#include <utility>

namespace gpucompute::server {

absl::StatusOr<ResolvedCompute> ResolveComputeRequest(kernels::Op op, const wire::ComputeRequest& r,
                                                      const Limits& limits, TensorStore* store,
                                                      const SharedMemoryRegistry* regions) {
  ResolvedCompute out;
  auto placement = ResolvePlacement(r, store, regions);
  if (!placement.ok()) return placement.status();
  out.placement = *placement;
  const bool matmul = op == kernels::Op::kMatMul;
  auto a = ResolveOperand(r.a, matmul ? "a" : "input", store, regions);
  if (!a.ok()) return a.status();
  absl::StatusOr<kernels::Problem> problem;
  const bool kept = out.placement.keep;
  switch (op) {
    case kernels::Op::kMatMul: {
      auto b = ResolveOperand(r.b, "b", store, regions);
      if (!b.ok()) return b.status();
      problem = ValidateMatMul(a->shape, b->shape, limits, kept, r.output_dtype);
      out.b_tensor = std::move(b->tensor);
      out.b_slice = std::move(b->slice);
      break;
    }
    case kernels::Op::kTranspose: problem = ValidateTranspose(a->shape, limits, kept); break;
    case kernels::Op::kReduce:
      problem = ValidateReduce(a->shape, r.reduce_op, r.reduce_axis, limits, kept, r.output_dtype);
      break;
  }
  if (!problem.ok()) return problem.status();
  out.problem = *problem;
  out.a_tensor = std::move(a->tensor);
  out.a_slice = std::move(a->slice);
  if (out.placement.shared_memory) {
    const kernels::Problem& p = out.problem;
    auto slice = ResolveSlice(*out.placement.shared_memory, kernels::OutputBytes(p),
                              "output.shared_memory", regions);
    if (!slice.ok()) return slice.status();
    out.out_slice = std::move(*slice);
  }
  return out;
}

}  // namespace gpucompute::server
