// A compute request (MatMul, Transpose, Reduce) as parsed from the wire,
// resolved: its operands' tensors and shared-memory slices looked up, where
// its result goes, and the whole validated into a Problem, with the status
// docs/contract.md's table asks for at the first thing wrong.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "gpucompute/kernels/problem.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_store.h"
#include "server/grpc/tensor_requests.h"
#include "server/grpc/validate.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {

// The request's operands (tensors looked up) and where its result goes,
// validated into a Problem.
struct ResolvedCompute {
  kernels::Problem problem;
  std::shared_ptr<Tensor> a_tensor, b_tensor;
  std::optional<RegionSlice> a_slice, b_slice, out_slice;
  Placement placement;
};

absl::StatusOr<ResolvedCompute> ResolveComputeRequest(kernels::Op op, const wire::ComputeRequest& r,
                                                      const Limits& limits, TensorStore* store,
                                                      const SharedMemoryRegistry* regions);

}  // namespace gpucompute::server
