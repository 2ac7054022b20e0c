// Small host/device helpers shared by the kernel files (no abseil here, so
// nvcc can compile every includer).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::kernels::cuda {

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

#ifdef __CUDACC__
__device__ __forceinline__ int64_t CeilDivDevice(int64_t a, int64_t b) { return (a + b - 1) / b; }
#endif

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The 16-byte vector of an element type: 4 floats or 2 doubles.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  using Type = float4;
  static constexpr int kWidth = 4;
};
template <>
struct Vec16<double> {
  using Type = double2;
  static constexpr int kWidth = 2;
};

// Multiprocessors of the current device, cached per device; 132 (an H100/H200)
// when no device answers, so that size queries work without a GPU.
int DeviceSmCount();

// Rounds a byte count up so that consecutive workspace slices stay 256-byte
// aligned.
inline size_t AlignBytes(size_t bytes) { return (bytes + 255) & ~size_t(255); }

}  // namespace gpucompute::kernels::cuda
