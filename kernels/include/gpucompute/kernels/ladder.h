// A ladder: the variants of one op on one backend, declared as one table next
// to their kernels, simplest first (the order GetServerInfo, Profile and the
// README list them in). A new variant is its kernel file plus one row:
//
//   {.name = "tiled64",
//    .description = "64x64 shared-memory tiles, one output element per thread",
//    .dtypes = kFloat32AndFloat64,
//    .launch = GPUCOMPUTE_KERNEL_FUNCTION(CudaLaunch, TiledMatMul64)},
//
// where the kernel file defines `LaunchResult TiledMatMul64(const LaunchArgs&)`
// in the table's namespace. Sources are picked up by a glob; no header lists
// launchers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gpucompute/kernels/registry.h"

// The function `name` of type `Signature`, defined in a kernel file, as a
// pointer: the block-scope declaration in the lambda declares it in the
// namespace enclosing the table (a named one: a function declared in an
// anonymous namespace would need its definition in the same file). A missing
// or misspelt definition fails at link time.
#define GPUCOMPUTE_KERNEL_FUNCTION(Signature, name) \
  ([] {                                             \
    Signature name;                                 \
    return &name;                                   \
  }())

namespace gpucompute::kernels {

// The element types a variant supports (its inputs'; the output of a MatMul
// or Reduce of 16-bit inputs may be float32 on request, which every variant
// that takes them supports).
class DTypeSet {
 public:
  constexpr DTypeSet(std::initializer_list<DType> dtypes) {
    for (DType d : dtypes) bits_ |= Bit(d);
  }
  constexpr bool Has(DType dtype) const { return (bits_ & Bit(dtype)) != 0; }

 private:
  static constexpr unsigned Bit(DType dtype) { return 1u << static_cast<unsigned>(dtype); }
  unsigned bits_ = 0;
};
inline constexpr DTypeSet kFloat32Only{DType::kFloat32};
inline constexpr DTypeSet kFloat32AndFloat64{DType::kFloat32, DType::kFloat64};
inline constexpr DTypeSet kHalfPrecision{DType::kFloat16, DType::kBFloat16};
inline constexpr DTypeSet kEveryDType{DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                      DType::kBFloat16};
inline constexpr DTypeSet kFloat32AndHalf{DType::kFloat32, DType::kFloat16, DType::kBFloat16};

// Scratch bytes a launch of `p` needs (Variant::workspace_bytes).
using WorkspaceFunction = size_t(const Problem&);

// One row of a ladder table. `Launch` is the backend's launcher type
// (CudaLaunch in kernels/cuda/launcher.h, CpuLaunch below), `BatchLaunch`
// its batched launcher's (CudaBatchLaunch; none on the CPU).
template <typename Launch, typename BatchLaunch = void>
struct LadderRow {
  const char* name = "";
  const char* description = "";  // one line: what the variant does
  DTypeSet dtypes = {};
  bool reduced_precision = false;  // e.g. TF32: "auto" picks it only when the request allows
  int fallback_rank = 0;           // Variant::fallback_rank: "auto"'s pick before measuring
  WorkspaceFunction* workspace_bytes = nullptr;  // null: no scratch
  bool zero_copy = false;                        // Variant::zero_copy: plain loads and stores only
  int64_t grid_y_rows = 0;  // Variant::grid_y_rows: output rows a block on grid.y computes
  VariantRole role = VariantRole::kNone;  // Variant::role: at most one row a role
  // Built for sm_90a alone (Hopper's wgmma, TMA, setmaxnreg): the CUDA
  // ladders list the row only where every visible device is compute
  // capability 9.0.
  bool requires_sm90a = false;
  Lesson lesson = {};  // Variant::lesson: the idea it teaches against `lesson.before`
  Launch* launch = nullptr;
  // Variant::launch_batch: many problems of one shape in one launch; null:
  // none.
  BatchLaunch* launch_batch = nullptr;
};

// The Variant a row declares, without its launcher.
Variant DeclaredVariant(Op op, Backend backend, const char* name, const char* description,
                        DTypeSet dtypes, bool reduced_precision, int fallback_rank,
                        WorkspaceFunction* workspace_bytes);

// What every launch of a variant checks of its problem, alone or in a batch:
// the op, the element type, and a float32 output only for MatMul and Reduce
// of 16-bit inputs. Holds copies: the variant may move after it is made.
class ProblemCheck {
 public:
  explicit ProblemCheck(const Variant& variant);
  absl::Status operator()(const Problem& p) const;

 private:
  Op op_;
  std::string name_;
  std::vector<DType> dtypes_;
};

// Variant::launch for `variant`: checks what every launch must (the
// problem, then the workspace size) and then runs `run`.
std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> CheckedLaunch(
    const Variant& variant,
    std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> run);

// A ladder's rows as registered: each role held by one row at most, and
// each lesson's `before` another row of the ladder.
absl::Status CheckLadder(const Registry& registry, Op op, Backend backend);

// Registers `rows` in order, each with `adapt(name, row.launch)` (the
// backend's call of its launcher) behind CheckedLaunch, and, where a row
// has a batched launcher, `adapt_batch(variant, row.launch_batch)` sets the
// variant's launch_batch. A row without a launcher, a duplicate name or an
// empty one fails, naming the row, and so does a ladder CheckLadder refuses.
template <typename Launch, typename BatchLaunch, typename Adapt,
          typename AdaptBatch = std::nullptr_t>
absl::Status AddLadder(Registry& registry, Op op, Backend backend,
                       std::span<const LadderRow<Launch, BatchLaunch>> rows, const Adapt& adapt,
                       const AdaptBatch& adapt_batch = nullptr) {
  int rung = 0;
  for (const LadderRow<Launch, BatchLaunch>& row : rows) {
    Variant v = DeclaredVariant(op, backend, row.name, row.description, row.dtypes,
                                row.reduced_precision, row.fallback_rank, row.workspace_bytes);
    v.zero_copy = row.zero_copy;
    v.grid_y_rows = row.grid_y_rows;
    v.role = row.role;
    v.lesson = row.lesson;
    v.rung = rung++;
    if (row.launch != nullptr) v.launch = CheckedLaunch(v, adapt(v.name, row.launch));
    if constexpr (!std::is_same_v<AdaptBatch, std::nullptr_t>) {
      if (row.launch_batch != nullptr) adapt_batch(v, row.launch_batch);
    }
    if (absl::Status s = registry.Add(std::move(v)); !s.ok()) return s;
  }
  return CheckLadder(registry, op, backend);
}

// The CPU launcher: runs synchronously on the calling thread; host pointers.
using CpuLaunch = absl::Status(const Problem&, const Buffers&);
absl::Status AddCpuLadder(Registry& registry, Op op, std::span<const LadderRow<CpuLaunch>> rows);

}  // namespace gpucompute::kernels
