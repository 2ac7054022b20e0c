// The read-only ceiling's kernel: a streaming read of a buffer, every byte
// read once and nothing written but a guard, so its time is what reading
// memory costs (what a reduction is held to).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::server::cuda {

// Reads `count` floats (a multiple of 4, 16-byte aligned) with `blocks`
// blocks, each thread keeping `in_flight` 16-byte loads outstanding (4 or
// 8). Writes `sink` only when the sum takes an impossible value.
cudaError_t LaunchStreamingRead(const float* data, int64_t count, float* sink, int blocks,
                                int in_flight, cudaStream_t stream);

// Leaves the L2 holding only clean lines of `buffer` (`bytes`, a multiple
// of 16, at least twice the L2): writes it (the byte `round`), which evicts
// every older line, then reads it with ordinary loads, which evicts those
// writes and has them written back now. A profiled range that follows reads
// its operands from DRAM and counts no write-back of earlier work. (A read
// with evict-first loads, as above, replaces its own lines and leaves older
// ones in place.)
cudaError_t FlushL2Clean(void* buffer, int64_t bytes, int blocks, int round, cudaStream_t stream);

}  // namespace gpucompute::server::cuda
