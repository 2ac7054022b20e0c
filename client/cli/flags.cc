#include "flags.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpucompute::cli {

absl::StatusOr<ParsedArgs> ParsedArgs::Parse(const std::vector<std::string>& args,
                                             const std::vector<FlagSpec>& specs) {
  ParsedArgs out;
  for (const FlagSpec& spec : specs) out.defaults_[spec.name] = spec.default_value;
  auto find = [&](const std::string& name) -> const FlagSpec* {
    for (const FlagSpec& spec : specs) {
      if (spec.name == name) return &spec;
    }
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.positional_.insert(out.positional_.end(), args.begin() + i + 1, args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-' || arg == "-") {
      out.positional_.push_back(arg);
      continue;
    }
    // Both -flag and --flag, as absl and gflags accept.
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body;
    std::string value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    if (name == "help" || name == "h") {
      out.help_ = true;
      continue;
    }
    const FlagSpec* spec = find(name);
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (spec->value_name.empty()) {
      if (!has_value) {
        value = "true";
      } else if (value != "true" && value != "false") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " is a boolean flag: use --",
                                                       name, " or --", name, "=false, not '", value,
                                                       "'"));
      }
    } else if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (--", name, "=", spec->value_name, ")"));
      }
      value = args[++i];
    }
    out.values_[name] = value;
  }
  return out;
}

std::string ParsedArgs::Get(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = defaults_.find(name); it != defaults_.end()) return it->second;
  return "";
}

std::string FormatFlagHelp(const std::vector<FlagSpec>& specs) {
  std::vector<std::string> lefts;
  size_t width = 0;
  for (const FlagSpec& spec : specs) {
    std::string left = absl::StrCat("  --", spec.name);
    if (!spec.value_name.empty()) absl::StrAppend(&left, "=", spec.value_name);
    width = std::max(width, left.size());
    lefts.push_back(std::move(left));
  }
  std::string out;
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StrAppend(&out, lefts[i], std::string(width + 3 - lefts[i].size(), ' '), specs[i].help);
    if (!specs[i].default_value.empty()) {
      absl::StrAppend(&out, " (default: ", specs[i].default_value, ")");
    }
    out += "\n";
  }
  return out;
}

}  // namespace gpucompute::cli
