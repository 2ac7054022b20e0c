#include "gpucompute/common/flags_usage.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::common {
namespace {

// Flags of this project, not abseil's own (--flagfile, --fromenv, ...).
bool ProjectFlag(const absl::CommandLineFlag& flag) {
  return !absl::StrContains(flag.Filename(), "absl/") &&
         !absl::StrContains(flag.Filename(), "abseil");
}

void PrintFlagsHelp() {
  std::printf("%s\n\nFlags:\n", std::string(absl::ProgramUsageMessage()).c_str());
  std::map<std::string, const absl::CommandLineFlag*> sorted;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (ProjectFlag(*flag)) sorted.emplace(std::string(name), flag);
  }
  for (const auto& [name, flag] : sorted) {
    std::printf("  --%s=%s\n      %s\n", name.c_str(), flag->DefaultValue().c_str(),
                flag->Help().c_str());
  }
  std::printf("\n  --flagfile=FILE reads flags from a file; --version prints the version.\n");
}

}  // namespace

void HandleHelpAndVersion(int argc, char** argv, const std::string& program,
                          const std::string& version) {
  absl::FlagsUsageConfig config;
  config.version_string = [line = absl::StrCat(program, " ", version, "\n")] { return line; };
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull" ||
        arg == "--helpshort") {
      PrintFlagsHelp();
      std::exit(0);
    }
  }
}

}  // namespace gpucompute::common
