#include "gpucompute/kernels/ladder.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpucompute::kernels {

Variant DeclaredVariant(Op op, Backend backend, const char* name, const char* description,
                        DTypeSet dtypes, bool reduced_precision, int fallback_rank,
                        WorkspaceFunction* workspace_bytes) {
  Variant v;
  v.op = op;
  v.name = name;
  v.description = description;
  for (DType d : kAllDTypes) {
    if (dtypes.Has(d)) v.dtypes.push_back(d);
  }
  v.reduced_precision = reduced_precision;
  v.fallback_rank = fallback_rank;
  v.backend = backend;
  if (workspace_bytes != nullptr) v.workspace_bytes = workspace_bytes;
  return v;
}

absl::Status CheckLadder(const Registry& registry, Op op, Backend backend) {
  const std::vector<const Variant*> ladder = registry.List(op, backend);
  for (const Variant* v : ladder) {
    for (const Variant* other : ladder) {
      if (other == v) break;
      if (v->role != VariantRole::kNone && other->role == v->role) {
        return absl::InvalidArgumentError(
            absl::StrCat("variant ", OpName(op), "/", v->name, " takes the role of ", other->name));
      }
    }
    if (!v->HasLesson()) continue;
    if (v->lesson.before == v->name || registry.Find(op, backend, v->lesson.before) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("variant ", OpName(op), "/", v->name, ": its lesson's variant before, \"",
                       std::string(v->lesson.before), "\", is no other variant of its ladder"));
    }
    if (v->lesson.idea.empty() || v->lesson.text.empty() || v->lesson.counter.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variant ", OpName(op), "/", v->name, ": its lesson lacks an idea, a text or a counter"));
    }
  }
  return absl::OkStatus();
}

ProblemCheck::ProblemCheck(const Variant& variant)
    : op_(variant.op), name_(variant.name), dtypes_(variant.dtypes) {}

absl::Status ProblemCheck::operator()(const Problem& p) const {
  if (p.op != op_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": a ", OpName(p.op), " problem for a ", OpName(op_), " variant"));
  }
  if (std::find(dtypes_.begin(), dtypes_.end(), p.dtype) == dtypes_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " does not support ", DTypeName(p.dtype)));
  }
  if (p.float32_output && (p.op == Op::kTranspose || !IsHalfPrecision(p.dtype))) {
    return absl::InvalidArgumentError(absl::StrCat(name_,
                                                   ": a float32 output is for MatMul and "
                                                   "Reduce of 16-bit inputs, not ",
                                                   OpName(p.op), " of ", DTypeName(p.dtype)));
  }
  return absl::OkStatus();
}

std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> CheckedLaunch(
    const Variant& variant,
    std::function<absl::Status(const Problem&, const Buffers&, const LaunchContext&)> run) {
  return [check = ProblemCheck(variant), name = variant.name, workspace = variant.workspace_bytes,
          run = std::move(run)](const Problem& p, const Buffers& buf,
                                const LaunchContext& ctx) -> absl::Status {
    if (absl::Status s = check(p); !s.ok()) return s;
    const size_t needed = workspace ? workspace(p) : 0;
    if (buf.workspace_bytes < needed || (needed > 0 && buf.workspace == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " needs ", needed, " bytes of workspace, got ", buf.workspace_bytes));
    }
    return run(p, buf, ctx);
  };
}

}  // namespace gpucompute::kernels
