// --ceilings=FILE: device ceilings measured beforehand (gpucompute-bench
// --ceilings_out, or written by hand), used in place of the server's own
// start-up measurement for roofline fractions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "gpucompute/tools/v1/ceilings.pb.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// Reads `path`, the JSON of gpucompute.tools.v1.CeilingsFile, before any
// device is opened (a bad file fails start-up at once). INVALID_ARGUMENT
// naming the file and the entry for a file that cannot be read or parsed, a
// device named twice, or a figure that is negative or not finite.
absl::StatusOr<tools::v1::CeilingsFile> ReadCeilingsFile(const std::string& path);

// The figures the file gives for the device named `device` (0 where it
// gives none), so that the device need not measure them at start-up.
Ceilings GivenCeilings(const tools::v1::CeilingsFile& file, std::string_view device);

// Replaces, on each device the file names, every figure it gives (> 0); a
// figure it leaves out keeps the measured one. INVALID_ARGUMENT for a device
// this server does not have. Logs each device's resulting ceilings.
absl::Status ApplyCeilings(const tools::v1::CeilingsFile& file, const std::string& path,
                           const std::vector<std::unique_ptr<Device>>& devices);

}  // namespace gpucompute::server
