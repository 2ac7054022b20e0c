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

// What absl::ParseCommandLine would refuse on this command line (it prints
// its own message and exits 1): a flag the program does not define, a value
// that is not of the flag's type, a flag that needs a value and has none,
// or a negated boolean with a value. Names the first such flag; "" when
// there is none, or when --undefok or --flagfile hand checks to abseil.
// Lets a tool report a usage error as one (exit 2). Parsing a value sets
// the flag to it, as ParseCommandLine will.
std::string FlagSyntaxError(int argc, char** argv);

}  // namespace gpucompute::common
