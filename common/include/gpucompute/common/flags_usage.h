// --help and --version for the binaries whose flags are abseil's. Abseil's
// --help lists only flags defined in a file named after the program (so it
// printed "No flags matched."), exits 1, and --version reports the build
// mode, not a version.
#pragma once

#include <string>

namespace gpucompute::common {

// Call first in main, before absl::ParseCommandLine, after
// absl::SetProgramUsageMessage. --help (or -help, -h, --helpfull,
// --helpshort) prints the usage message and every flag of this project, not
// abseil's own, then exits 0; --version prints "<program> <version>".
void HandleHelpAndVersion(int argc, char** argv, const std::string& program,
                          const std::string& version);

}  // namespace gpucompute::common
