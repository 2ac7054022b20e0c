// The CPU's multiply-add rate, as the CPU MatMul runs it: the CPU backend's
// FLOP ceiling (its roofline) is measured with this loop, so that a kernel
// and its ceiling use the same instructions on the same host.
#pragma once

#include <cstdint>

namespace gpucompute::kernels {

// FLOPs of one iteration of CpuMultiplyAddChains on this core.
int64_t CpuMultiplyAddChainFlops();

// Runs `iterations` rounds of 8 independent vectors of float64
// multiply-adds held in registers, with the vector width and instructions
// the CPU MatMul uses on this core. Returns a value that depends on every
// one: the caller publishes it, so that the loop is not dropped.
double CpuMultiplyAddChains(int64_t iterations);

}  // namespace gpucompute::kernels
