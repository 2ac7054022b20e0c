// The float64 reference of a large MatMul, computed on the device with
// cuBLAS DGEMM (host loops would take minutes).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "gpucompute/kernels/problem.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/slot.h"

namespace gpucompute::server::cuda {

// Matmuls above this many multiply-adds get their reference from
// DeviceMatMulReference instead of host loops.
constexpr double kHostReferenceMaxMacs = 1 << 27;

// C = A * B of the device operands `a` and `b` (of `p`'s dtype) in float64,
// on `slot`'s stream, copied to the host. Widened copies of float32 inputs
// and C are taken from `memory`: the caller reserves 8 bytes per element of
// A, B and C for them.
absl::StatusOr<std::vector<double>> DeviceMatMulReference(const kernels::Problem& p, const void* a,
                                                          const void* b, RequestMemory& memory,
                                                          Slot& slot, HostCopyPool& copier);

}  // namespace gpucompute::server::cuda
