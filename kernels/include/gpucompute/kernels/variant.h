// A kernel variant: one named way to compute an op, with its launcher.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpucompute/kernels/problem.h"

namespace gpucompute::kernels {

// Caller-owned memory for one launch. Pointers are device pointers for CUDA
// variants and host pointers for CPU variants. `b` is null for ops with one
// input. `workspace` holds at least Variant::workspace_bytes(problem) bytes.
struct Buffers {
  const void* a = nullptr;
  const void* b = nullptr;
  void* out = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Execution context owned by the caller. For CUDA variants `stream` is a
// cudaStream_t and `cublas` a cublasHandle_t (created by the caller, any
// stream; the launcher binds it to `stream`). Both are null for CPU variants.
struct LaunchContext {
  void* stream = nullptr;
  void* cublas = nullptr;
};

struct Variant {
  Op op = Op::kMatMul;
  std::string name;
  std::string description;  // one line: what the variant does
  std::vector<DType> dtypes;
  bool reduced_precision = false;  // e.g. TF32: never chosen by "auto" unless allowed
  // "auto" on a shape it has not measured runs the supported variant with the
  // lowest positive rank (ties: the earlier one); 0 never stands in.
  int fallback_rank = 0;
  Backend backend = Backend::kCpu;
  // CUDA: the kernels read operands and write results with plain loads and
  // stores, so a small request may hand them pinned host memory mapped into
  // the device (zero-copy) instead of copying both ways. Vendor libraries'
  // variants are left out: what their kernels do with such pointers is
  // theirs to say, and they do not say.
  bool zero_copy = false;
  // Scratch memory the launch needs; null means none.
  std::function<size_t(const Problem&)> workspace_bytes;
  // Enqueues the computation (CUDA: asynchronously on ctx.stream; CPU:
  // synchronously). Returns an error for launch failures, never aborts.
  std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> launch;

  bool Supports(DType dtype) const;
  size_t WorkspaceBytes(const Problem& p) const { return workspace_bytes ? workspace_bytes(p) : 0; }
};

}  // namespace gpucompute::kernels
