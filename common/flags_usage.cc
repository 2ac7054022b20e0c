#include "gpucompute/common/flags_usage.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

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

namespace {

// A command-line word that is a flag: its name and, after '=', its value.
struct FlagWord {
  absl::string_view name;
  std::optional<absl::string_view> value;
};

std::optional<FlagWord> AsFlag(absl::string_view arg) {
  if (arg.size() < 2 || arg[0] != '-') return std::nullopt;
  arg.remove_prefix(arg[1] == '-' ? 2 : 1);
  const size_t equals = arg.find('=');
  if (equals == absl::string_view::npos) return FlagWord{arg, std::nullopt};
  return FlagWord{arg.substr(0, equals), arg.substr(equals + 1)};
}

// Flags whose handling is abseil's own: flags read from a file or the
// environment, unknown flags allowed.
bool HandsChecksToAbseil(int argc, char** argv) {
  for (int i = 1; i < argc && absl::string_view(argv[i]) != "--"; ++i) {
    const std::optional<FlagWord> word = AsFlag(argv[i]);
    if (word && (word->name == "flagfile" || word->name == "fromenv" ||
                 word->name == "tryfromenv" || word->name == "undefok")) {
      return true;
    }
  }
  return false;
}

// Abseil's usage flags, which it answers itself and reflection does not list.
bool UsageFlag(absl::string_view name) {
  for (absl::string_view usage : {"help", "helpfull", "helpshort", "helppackage", "helpon",
                                  "helpmatch", "version", "only_check_args"}) {
    if (name == usage) return true;
  }
  return false;
}

}  // namespace

std::string FlagSyntaxError(int argc, char** argv) {
  if (HandsChecksToAbseil(argc, argv)) return "";
  for (int i = 1; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "--") break;  // the rest is positional
    const std::optional<FlagWord> word = AsFlag(argv[i]);
    if (!word || UsageFlag(word->name)) continue;
    const absl::string_view name = word->name;
    const bool has_value = word->value.has_value();
    absl::string_view value = word->value.value_or("");
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && positive->IsOfType<bool>()) {
        if (has_value) return absl::StrCat("--", name, " takes no value (got \"", value, "\")");
        continue;
      }
    }
    if (flag == nullptr) return absl::StrCat("unknown flag --", name);
    if (flag->IsOfType<bool>() && !has_value) continue;
    if (!has_value) {
      if (i + 1 == argc) return absl::StrCat("--", name, " needs a value");
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::StrCat("--", name, ": \"", value, "\" is not a valid value: ", error);
    }
  }
  return "";
}

}  // namespace gpucompute::common
