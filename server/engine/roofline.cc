#include "server/engine/roofline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

// The bandwidth that matches the problem's access pattern.
double BandwidthFor(const kernels::Problem& p, const Ceilings& ceilings) {
  if (p.op == kernels::Op::kReduce && ceilings.gbytes_per_s_read > 0) {
    return ceilings.gbytes_per_s_read;
  }
  return ceilings.gbytes_per_s;
}

}  // namespace

double RooflineFraction(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                        bool reduced_precision) {
  if (median_us <= 0) return 0;
  double bound_us = 0;
  if (const double bandwidth = BandwidthFor(p, ceilings); bandwidth > 0) {
    bound_us = std::max(bound_us, kernels::MinimalBytes(p) / (bandwidth * 1e3));
  }
  if (const double peak = ceilings.GFlopsFor(p.dtype, reduced_precision); peak > 0) {
    bound_us = std::max(bound_us, kernels::UsefulFlops(p) / (peak * 1e3));
  }
  return bound_us / median_us;
}

RooflineVerdict JudgeRoofline(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                              bool reduced_precision) {
  RooflineVerdict verdict;
  verdict.fraction = RooflineFraction(p, ceilings, median_us, reduced_precision);
  if (p.op == kernels::Op::kReduce && ceilings.gbytes_per_s_read <= 0 &&
      ceilings.gbytes_per_s > 0) {
    verdict.note = kNoReadCeilingNote;
  }
  if (verdict.fraction > kRooflineSuspectAbove) {
    if (!verdict.note.empty()) verdict.note += "; ";
    verdict.note += kAboveCeilingNote;
    if (ceilings.cache_bytes > 0 && kernels::MinimalBytes(p) <= double(ceilings.cache_bytes)) {
      verdict.note +=
          absl::StrCat(" (", kFitsInCacheNote, ": ", ceilings.cache_bytes >> 20, " MiB)");
    }
  }
  return verdict;
}

}  // namespace gpucompute::server
