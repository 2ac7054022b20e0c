// What every subcommand of `gpucompute` shares: its entry in the command
// table, the exit codes, flag values read with errors that name the flag, and
// the printing helpers.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "flags.h"
#include "gpucompute/client.h"
#include "gpucompute/matrix.h"

namespace gpucompute::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Ends the command on a usage error (bad flags, unreadable or malformed
// inputs): the message on stderr, exit 2.
int UsageError(const absl::Status& status);

// Ends the command on a failed call: the message on stderr, exit 1.
int CallFailed(const absl::Status& status);

struct Command {
  std::string name;
  std::string summary;      // one line for `gpucompute --help`
  std::string synopsis;     // after "gpucompute NAME "
  bool takes_files;         // .npy files as arguments (else no arguments)
  std::string description;  // paragraphs shown by --help
  std::vector<FlagSpec> flags;
  int64_t default_deadline_ms;
  std::function<int(const ParsedArgs&, const Client&)> run;
};

// The commands in the order `gpucompute --help` lists them, by group:
// op_commands.cc, profile_command.cc, tensor_commands.cc,
// shared_memory_commands.cc, server_commands.cc.
std::vector<Command> OpCommands();
std::vector<Command> ProfileCommands();
std::vector<Command> TensorCommands();
std::vector<Command> SharedMemoryCommands();
std::vector<Command> ServerCommands();

std::vector<FlagSpec> Concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b);

// A flag's value read by `parse` (one of the library's Parse* functions);
// errors name the flag: "--op: expected sum, min, max or mean, got 'median'".
template <typename Parse>
auto ParseFlag(const ParsedArgs& args, const std::string& flag, Parse parse)
    -> decltype(parse(std::string())) {
  auto value = parse(args.Get(flag));
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", value.status().message()));
  }
  return value;
}

absl::StatusOr<int64_t> ParseInt(const ParsedArgs& args, const std::string& flag, int64_t min,
                                 int64_t max = std::numeric_limits<int64_t>::max());

absl::StatusOr<OpShape> ParseShapeFlag(const ParsedArgs& args, const std::string& flag, v1::Op op);

// "1.50 GiB", "2.00 MiB" or "512 bytes".
std::string FormatBytes(int64_t bytes);

// The matrix's shape, min, max and mean, and the whole matrix when small.
void PrintSummary(const Matrix& m);

}  // namespace gpucompute::cli
