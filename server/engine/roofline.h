// The roofline a measured time is judged against: the least time the
// device's ceilings allow for a problem.
#pragma once

#include "server/engine/device.h"

namespace gpucompute::server {

// Fraction of the roofline bound: the time the device's ceilings allow for
// this problem (max of bytes / bandwidth and flops / peak) over `median_us`.
// Reduced-precision variants are held to the TF32 ceiling when one was measured.
double RooflineFraction(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                        bool reduced_precision = false);

}  // namespace gpucompute::server
