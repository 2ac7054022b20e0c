// Turns a device's measurements into a ProfileResponse: medians, useful
// GFLOP/s and GB/s, fraction of the roofline (with a note when it is in
// doubt), fastest correct variant first, and the comparisons of variants
// that differ by one idea.
#pragma once

#include <string>
#include <vector>

#include "gpucompute/v1/compute.pb.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// `counters_requested`: the request asked for hardware counters; rows carry
// what the device read, and each row without them says why.
void FillProfileResponse(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
                         const DeviceDescription& device, const Ceilings& ceilings,
                         const std::string& selected, v1::ProfileResponse* response,
                         bool counters_requested = false);

// The note a row gets when counters were asked for and the device gave
// neither counters nor a reason (a CPU server; a variant that failed).
std::string CountersUnavailableNote(kernels::Backend backend, bool ran_ok = true);

}  // namespace gpucompute::server
