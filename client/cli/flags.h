// A small per-subcommand flag parser: `--name=value`, `--name value`,
// boolean `--name` / `--name=false`, positionals, and `--` to end flags.
// absl flags are global to the binary, which does not fit subcommands that
// each accept different flags with their own --help.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gpucompute::cli {

struct FlagSpec {
  std::string name;           // without the leading --
  std::string value_name;     // "FILE", "MxN", ...; empty for a boolean flag
  std::string default_value;  // shown in --help; "" shows nothing
  std::string help;
};

class ParsedArgs {
 public:
  // Parses args (the words after the subcommand). Unknown flags and missing
  // values are INVALID_ARGUMENT with a message naming the flag.
  static absl::StatusOr<ParsedArgs> Parse(const std::vector<std::string>& args,
                                          const std::vector<FlagSpec>& specs);

  bool help() const { return help_; }
  // Whether the flag was given on the command line.
  bool Has(const std::string& name) const { return values_.contains(name); }
  // The given value, else the spec's default.
  std::string Get(const std::string& name) const;
  bool GetBool(const std::string& name) const { return Get(name) == "true"; }
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> defaults_;
  std::vector<std::string> positional_;
};

// "  --name=VALUE   help (default: x)" lines, aligned.
std::string FormatFlagHelp(const std::vector<FlagSpec>& specs);

}  // namespace gpucompute::cli
