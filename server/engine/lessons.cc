#include "server/engine/lessons.h"

#include <algorithm>

namespace gpucompute::server {
namespace {

using kernels::Op;

// Variant names are the CUDA ladders' (kernels/cuda/<op>/ladder.cc); a unit
// test checks each against them.
constexpr Lesson kLessons[] = {
    {Op::kTranspose, "coalescing",
     "stage a tile in shared memory so the writes, not only the reads, are coalesced", "naive",
     "shared", "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"},
    {Op::kTranspose, "bank conflicts",
     "pad the 32x32 tile to 32x33 so a column read hits 32 different banks", "shared",
     "shared_padded", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"},
    {Op::kTranspose, "swizzle vs padding",
     "XOR-swizzle the columns instead of padding: conflict-free without the extra column",
     "shared_padded", "shared_swizzled",
     "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"},
    {Op::kTranspose, "vector loads",
     "16-byte global loads and stores: a quarter of the memory instructions for the same tile",
     "shared_padded_wide", "shared_padded_vec16", "smsp__inst_executed_op_global_ld.sum"},
    {Op::kMatMul, "tiling",
     "reuse 32x32 tiles of A and B from shared memory instead of reading global memory per "
     "multiply-add",
     "naive", "tiled32", "smsp__inst_executed_op_global_ld.sum"},
    {Op::kMatMul, "register tiling",
     "an 8x8 register tile per thread: each shared-memory load feeds 8 multiply-adds "
     "(with 16-byte loads and double buffering)",
     "tiled32", "register_tiled", "smsp__inst_executed_pipe_lsu.sum"},
    {Op::kReduce, "divergence",
     "sequential addressing keeps the active threads of a tree step in whole warps (and adds "
     "two elements per thread on load)",
     "interleaved", "sequential", "smsp__inst_executed.sum"},
};

// A counter `before` -> `after` as the idea predicts: a fall (or a rise),
// or both at zero where the idea keeps a count at none.
bool AsPredicted(double before, double after, bool rises) {
  if (before == 0 && after == 0) return true;
  return rises ? after > before : after < before;
}

const CounterValue* FindValue(const std::vector<CounterValue>& values, std::string_view metric) {
  auto it = std::find_if(values.begin(), values.end(),
                         [&](const CounterValue& c) { return c.metric == metric; });
  return it != values.end() ? &*it : nullptr;
}

}  // namespace

absl::Span<const Lesson> Lessons() { return kLessons; }

std::vector<MeasuredLesson> MeasureLessons(Op op, absl::Span<const TimedVariant> variants) {
  auto ok_variant = [&](std::string_view name) -> const TimedVariant* {
    auto it = std::find_if(variants.begin(), variants.end(),
                           [&](const TimedVariant& v) { return v.name == name; });
    return it != variants.end() && it->ok && it->median_us > 0 ? &*it : nullptr;
  };
  std::vector<MeasuredLesson> out;
  for (const Lesson& lesson : kLessons) {
    if (lesson.op != op) continue;
    const TimedVariant* before = ok_variant(lesson.before);
    const TimedVariant* after = ok_variant(lesson.after);
    if (before == nullptr || after == nullptr) continue;
    MeasuredLesson m{&lesson, before->median_us / after->median_us};
    const CounterValue* cb = FindValue(before->counters, lesson.counter);
    const CounterValue* ca = FindValue(after->counters, lesson.counter);
    if (cb != nullptr && ca != nullptr) {
      m.has_counter = true;
      m.counter_before = cb->value;
      m.counter_after = ca->value;
      m.counter_as_predicted = AsPredicted(cb->value, ca->value, lesson.counter_rises);
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gpucompute::server
