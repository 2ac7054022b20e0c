#include "server/ops/flags_usage.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#ifndef GPUCOMPUTE_VERSION
#error "GPUCOMPUTE_VERSION must be defined by the build"
#endif

namespace gpucompute::server {
namespace {

// Flags of this project, not abseil's own (--flagfile, --fromenv, ...).
bool OwnFlag(const absl::CommandLineFlag& flag) {
  return !absl::StrContains(flag.Filename(), "absl/") &&
         !absl::StrContains(flag.Filename(), "abseil");
}

void PrintHelp() {
  std::printf("%s\n\nFlags:\n", std::string(absl::ProgramUsageMessage()).c_str());
  std::map<std::string, const absl::CommandLineFlag*> sorted;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (OwnFlag(*flag)) sorted.emplace(std::string(name), flag);
  }
  for (const auto& [name, flag] : sorted) {
    std::printf("  --%s (default: %s)\n      %s\n", name.c_str(), flag->DefaultValue().c_str(),
                flag->Help().c_str());
  }
  std::printf("\n  --flagfile=FILE reads flags from a file; --version prints the version.\n");
}

}  // namespace

void HandleHelpAndVersion(int argc, char** argv, const std::string& program) {
  absl::FlagsUsageConfig config;
  config.version_string = [program] {
    return absl::StrCat(program, " ", GPUCOMPUTE_VERSION, "\n");
  };
  absl::SetFlagsUsageConfig(config);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull") {
      PrintHelp();
      std::exit(0);
    }
  }
}

}  // namespace gpucompute::server
