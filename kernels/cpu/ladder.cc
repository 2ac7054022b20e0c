// The CPU backend's ladders: one table per op, simplest first. The launchers
// are defined in the kernel files beside this one (cpu_variants.cc).
#include "gpucompute/kernels/ladder.h"

// A named namespace: the launchers a row names are declared in the table's
// namespace (see GPUCOMPUTE_KERNEL_FUNCTION).
namespace gpucompute::kernels::cpu {

constexpr LadderRow<CpuLaunch> kMatMulLadder[] = {
    {.name = "cpu_reference",
     .description = "CPU: 4x8 register tiles in row bands on all cores, float64 accumulation, AVX2 "
                    "and FMA where the core has them",
     .dtypes = kEveryDType,
     .fallback_rank = 1,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CpuLaunch, CpuMatMul)},
};

constexpr LadderRow<CpuLaunch> kTransposeLadder[] = {
    {.name = "cpu_reference",
     .description = "CPU: 32x32 cache blocks on all cores",
     .dtypes = kEveryDType,
     .fallback_rank = 1,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CpuLaunch, CpuTranspose)},
};

constexpr LadderRow<CpuLaunch> kReduceLadder[] = {
    {.name = "cpu_reference",
     .description = "CPU: row-major passes on all cores, float64 accumulation, fixed-order combine",
     .dtypes = kEveryDType,
     .fallback_rank = 1,
     .launch = GPUCOMPUTE_KERNEL_FUNCTION(CpuLaunch, CpuReduce)},
};

}  // namespace gpucompute::kernels::cpu

namespace gpucompute::kernels {

absl::Status AddCpuLadder(Registry& registry, Op op, std::span<const LadderRow<CpuLaunch>> rows) {
  return AddLadder(registry, op, Backend::kCpu, rows, [](const std::string&, CpuLaunch* launch) {
    return [launch](const Problem& p, const Buffers& buf, const LaunchContext&) {
      return launch(p, buf);
    };
  });
}

absl::Status RegisterCpuVariants(Registry& registry) {
  using Rows = std::span<const LadderRow<CpuLaunch>>;
  for (auto [op, rows] : {std::pair{Op::kMatMul, Rows(cpu::kMatMulLadder)},
                          {Op::kTranspose, Rows(cpu::kTransposeLadder)},
                          {Op::kReduce, Rows(cpu::kReduceLadder)}}) {
    if (absl::Status s = AddCpuLadder(registry, op, rows); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace gpucompute::kernels
