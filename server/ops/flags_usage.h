// --help and --version for the server's binaries. Abseil's --help lists only
// flags defined in a file named after the program (so it printed "No flags
// matched."), exits 1, and --version reports the build mode, not a version.
#pragma once

#include <string>

namespace gpucompute::server {

// Call first in main, before absl::ParseCommandLine. --help (or -h,
// --helpfull) prints the usage message and every flag of this project, then
// exits 0; --version prints "<program> <version>".
void HandleHelpAndVersion(int argc, char** argv, const std::string& program);

}  // namespace gpucompute::server
