// Turns a device's measurements into a ProfileResponse: medians, useful
// GFLOP/s and GB/s, fraction of the roofline, fastest correct variant first.
#pragma once

#include <string>
#include <vector>

#include "gpucompute/v1/compute.pb.h"
#include "server/device.h"

namespace gpucompute::server {

// Fraction of the roofline bound: the time the device's ceilings allow for
// this problem (max of bytes / bandwidth and flops / peak) over `median_us`.
// Reduced-precision variants are held to the TF32 ceiling when one was measured.
double RooflineFraction(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                        bool reduced_precision = false);

void FillProfileResponse(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
                         const DeviceDescription& device, const Ceilings& ceilings,
                         const std::string& selected, v1::ProfileResponse* response);

}  // namespace gpucompute::server
