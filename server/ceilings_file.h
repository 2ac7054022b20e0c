// --ceilings=FILE: device ceilings measured beforehand (gpucompute-bench
// --ceilings_out, or written by hand), used in place of the server's own
// start-up measurement for roofline fractions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// Reads `path` (the JSON of gpucompute.tools.v1.CeilingsFile) and replaces,
// on each device it names, every figure it gives (> 0); a figure it leaves
// out keeps the measured one. INVALID_ARGUMENT naming the file and the
// entry for a file that cannot be read or parsed, a device the server does
// not have, a device named twice, or a figure that is negative or not finite.
// Logs each device's resulting ceilings.
absl::Status ApplyCeilingsFile(const std::string& path,
                               const std::vector<std::unique_ptr<Device>>& devices);

}  // namespace gpucompute::server
