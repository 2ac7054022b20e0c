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
     "shared", "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"},
    {Op::kTranspose, "bank conflicts",
     "pad the 32x32 tile to 32x33 so a column read hits 32 different banks", "shared",
     "shared_padded", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"},
    {Op::kTranspose, "swizzle vs padding",
     "XOR-swizzle the columns instead of padding: conflict-free without the extra column",
     "shared_padded", "shared_swizzled", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"},
    {Op::kTranspose, "vector loads",
     "16-byte global loads and stores: a quarter of the memory instructions for the same tile",
     "shared_padded_wide", "shared_padded_vec16", "smsp__inst_executed_op_global_ld.sum"},
    {Op::kMatMul, "tiling",
     "reuse 32x32 tiles of A and B from shared memory instead of reading global memory per "
     "multiply-add",
     "naive", "tiled32", "dram__bytes_read.sum"},
    {Op::kMatMul, "register tiling",
     "an 8x8 register tile per thread: each shared-memory load feeds 8 multiply-adds "
     "(with 16-byte loads and double buffering)",
     "tiled32", "register_tiled", "smsp__inst_executed_pipe_lsu.sum"},
    {Op::kReduce, "divergence",
     "sequential addressing keeps the active threads of a tree step in whole warps (and adds "
     "two elements per thread on load)",
     "interleaved", "sequential", "smsp__thread_inst_executed_per_inst_executed.ratio"},
};

}  // namespace

absl::Span<const Lesson> Lessons() { return kLessons; }

std::vector<MeasuredLesson> MeasureLessons(Op op, absl::Span<const TimedVariant> variants) {
  auto median_of = [&](std::string_view name) -> double {
    auto it = std::find_if(variants.begin(), variants.end(),
                           [&](const TimedVariant& v) { return v.name == name; });
    return it != variants.end() && it->ok ? it->median_us : 0;
  };
  std::vector<MeasuredLesson> out;
  for (const Lesson& lesson : kLessons) {
    if (lesson.op != op) continue;
    const double before = median_of(lesson.before), after = median_of(lesson.after);
    if (before <= 0 || after <= 0) continue;
    out.push_back({&lesson, before / after});
  }
  return out;
}

}  // namespace gpucompute::server
