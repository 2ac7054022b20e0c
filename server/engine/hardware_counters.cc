#include "server/engine/hardware_counters.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpucompute::server {
namespace {

// Nsight Compute's names, so a student can read the same counter with ncu
// (bench/counters_vs_ncu.sh does).
constexpr CounterSpec kCounters[] = {
    {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "count",
     "shared-memory load bank conflicts: extra passes warps' shared loads took because threads "
     "hit one bank"},
    {"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "count",
     "shared-memory store bank conflicts: extra passes warps' shared stores took because threads "
     "hit one bank"},
    {"dram__bytes_read.sum", "bytes", "bytes read from device memory (DRAM)"},
    {"dram__bytes_write.sum", "bytes", "bytes written to device memory (DRAM)"},
    {"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio", "sectors/request",
     "32-byte sectors per warp-wide global load: 4 when coalesced (float), up to 32 when strided"},
    {"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio", "sectors/request",
     "32-byte sectors per warp-wide global store: 4 when coalesced (float), up to 32 when strided"},
    {"smsp__inst_executed_op_global_ld.sum", "instructions",
     "warp-wide global load instructions executed"},
    {"smsp__inst_executed.sum", "instructions",
     "warp instructions executed (a divergent warp issues each for its few active threads)"},
    {"smsp__inst_executed_pipe_lsu.sum", "instructions",
     "warp-wide load/store-unit instructions (global and shared memory) executed"},
    {"lts__t_sector_hit_rate.pct", "%", "L2 cache hit rate, by sectors"},
    {"sm__warps_active.avg.pct_of_peak_sustained_active", "%",
     "achieved occupancy: active warps per SM over the most it can hold"},
    {"smsp__thread_inst_executed_per_inst_executed.ratio", "threads",
     "average active threads per warp instruction (32: no divergence)"},
    {"dram__throughput.avg.pct_of_peak_sustained_elapsed", "%",
     "device-memory throughput as a fraction of its peak, over the launch"},
    {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "%",
     "tensor pipe utilization: cycles the tensor cores were busy over the cycles the SMs were",
     true},
    {"smsp__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum", "wavefronts",
     "shared-memory wavefronts of cp.async (global to shared) copies: one per 128-byte line a "
     "warp's 16-byte chunks land in, so tile rows that straddle lines (padding) take more",
     true},
};

// A reading that failed because the launch failed, not the profiler.
struct LaunchFailure {
  absl::Status status = absl::OkStatus();
};

}  // namespace

absl::Span<const CounterSpec> ProfileCounters() { return kCounters; }

const CounterSpec* FindCounter(std::string_view metric) {
  for (const CounterSpec& c : kCounters) {
    if (c.metric == metric) return &c;
  }
  return nullptr;
}

std::vector<std::string_view> CountersFor(const kernels::Variant& variant,
                                          const kernels::Problem& p) {
  const bool tensor_cores = variant.reduced_precision ||
                            (p.op == kernels::Op::kMatMul && kernels::IsHalfPrecision(p.dtype));
  std::vector<std::string_view> metrics;
  for (const CounterSpec& c : kCounters) {
    if (!c.tensor_cores_only || tensor_cores) metrics.push_back(c.metric);
  }
  return metrics;
}

std::string CountersUnreadNote(const absl::Status& why) {
  std::string note = absl::StrCat("hardware counters not read: ", why.message());
  if (why.code() == absl::StatusCode::kPermissionDenied) {
    absl::StrAppend(&note, "; to allow it, ", kCounterPermissionAdvice);
  }
  return note;
}

absl::StatusOr<VariantCounters> ReadVariantCounters(CounterReader& reader,
                                                    const kernels::Variant& variant,
                                                    const kernels::Problem& p,
                                                    const CounterReplay& replay) {
  const std::vector<std::string_view> metrics = CountersFor(variant, p);
  LaunchFailure failure;
  CounterReplay watched;
  watched.prepare = [&]() -> absl::Status {
    absl::Status s = replay.prepare ? replay.prepare() : absl::OkStatus();
    if (!s.ok()) failure.status = s;
    return s;
  };
  watched.launch = [&]() -> absl::Status {
    absl::Status s = replay.launch();
    if (!s.ok()) failure.status = s;
    return s;
  };
  VariantCounters out;
  auto values = reader.Read(metrics, watched);
  if (!failure.status.ok()) return failure.status;
  if (!values.ok()) {
    out.note = CountersUnreadNote(values.status());
    return out;
  }
  if (values->size() != metrics.size()) {
    out.note = CountersUnreadNote(absl::InternalError(absl::StrCat(
        "the profiler returned ", values->size(), " values for ", metrics.size(), " metrics")));
    return out;
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < metrics.size(); ++i) {
    if (!(*values)[i]) {
      missing.emplace_back(metrics[i]);
      continue;
    }
    const CounterSpec& spec = *FindCounter(metrics[i]);
    out.values.push_back({std::string(spec.metric), *(*values)[i], std::string(spec.unit),
                          std::string(spec.meaning)});
  }
  if (!missing.empty()) {
    out.note = absl::StrCat("this device has no ", absl::StrJoin(missing, ", "));
  }
  return out;
}

}  // namespace gpucompute::server
