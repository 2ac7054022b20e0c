#include "server/engine/roofline.h"

#include <algorithm>

namespace gpucompute::server {

double RooflineFraction(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                        bool reduced_precision) {
  if (median_us <= 0) return 0;
  double bound_us = 0;
  if (ceilings.gbytes_per_s > 0) {
    bound_us = std::max(bound_us, kernels::MinimalBytes(p) / (ceilings.gbytes_per_s * 1e3));
  }
  if (const double peak = ceilings.GFlopsFor(p.dtype, reduced_precision); peak > 0) {
    bound_us = std::max(bound_us, kernels::UsefulFlops(p) / (peak * 1e3));
  }
  return bound_us / median_us;
}

}  // namespace gpucompute::server
