// Turns a device's measurements into a ProfileResponse: medians, useful
// GFLOP/s and GB/s, fraction of the roofline, fastest correct variant first.
#pragma once

#include <string>
#include <vector>

#include "gpucompute/v1/compute.pb.h"
#include "server/engine/device.h"

namespace gpucompute::server {

void FillProfileResponse(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
                         const DeviceDescription& device, const Ceilings& ceilings,
                         const std::string& selected, v1::ProfileResponse* response);

}  // namespace gpucompute::server
