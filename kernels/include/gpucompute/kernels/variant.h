// A kernel variant: one named way to compute an op, with its launcher.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// The most blocks a CUDA grid holds on y.
inline constexpr int64_t kMaxGridYBlocks = 65535;

// What a variant is to its ladder, for code that needs "the vendor's" or
// "the simplest" without naming one.
enum class VariantRole {
  kNone,
  // The simplest correct kernel, where the ladder starts: an exact
  // reference for ops whose result has no rounding (Transpose).
  kTextbook,
  // The vendor library at full precision: the reference other variants are
  // timed and checked against.
  kVendorReference,
  // The hand-written kernel the ladder builds up to, held to a fraction of
  // the vendor's speed.
  kFlagship,
};

// One idea a variant teaches against an earlier variant of its ladder
// (coalescing, bank conflicts, tiling, ...), as Profile reports it when both
// ran. Empty `before`: the variant teaches none.
struct Lesson {
  std::string_view before = {};  // the variant without the idea
  std::string_view idea = {};    // short name, e.g. "coalescing"
  std::string_view text = {};    // one line: what the idea changes
  // The hardware counter (a metric Profile reads) that explains the
  // difference, and which way the idea should move it.
  std::string_view counter = {};
  bool counter_rises = false;  // false: the idea lowers it
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
  // Kernels whose row blocks lie on grid.y: the output rows one block
  // computes, which bounds m at kMaxGridYBlocks times it. 0: no such bound.
  int64_t grid_y_rows = 0;
  VariantRole role = VariantRole::kNone;
  Lesson lesson = {};
  // Its place in its ladder (0: the first), for lists in teaching order.
  int rung = 0;
  // Scratch memory the launch needs; null means none.
  std::function<size_t(const Problem&)> workspace_bytes;
  // Enqueues the computation (CUDA: asynchronously on ctx.stream; CPU:
  // synchronously). Returns an error for launch failures, never aborts.
  std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> launch;
  // Optional (CUDA): enqueues one problem on each of up to
  // max_batch_members members' buffers (no workspace) as one kernel launch,
  // every member's result bit for bit what `launch` writes for it alone.
  // False, enqueueing nothing, where the variant has no one-launch form for
  // the problem or these buffers (the caller launches each member). Null:
  // no batched form at all.
  std::function<absl::StatusOr<bool>(const Problem&, std::span<const Buffers>,
                                     const LaunchContext&)>
      launch_batch;
  int max_batch_members = 0;

  bool Supports(DType dtype) const;
  // The largest m its grid takes; 0: any.
  int64_t MaxRows() const { return grid_y_rows * kMaxGridYBlocks; }
  bool TakesShape(const Problem& p) const { return grid_y_rows == 0 || p.m <= MaxRows(); }
  bool HasLesson() const { return !lesson.before.empty(); }
  size_t WorkspaceBytes(const Problem& p) const { return workspace_bytes ? workspace_bytes(p) : 0; }
};

}  // namespace gpucompute::kernels
