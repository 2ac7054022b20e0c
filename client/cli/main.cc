// gpucompute: command-line client for the gpucompute service.
// Exit codes: 0 ok, 1 the RPC (or writing --out) failed, 2 usage error
// (bad flags, unreadable or malformed input files).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "command.h"
#include "flags.h"
#include "gpucompute/client.h"
#include "gpucompute/host_memory.h"

namespace gpucompute::cli {
namespace {

const std::vector<FlagSpec>& ConnectionFlags() {
  static const std::vector<FlagSpec> flags = {
      {"server", "TARGET", "localhost:50051",
       "server address: HOST:PORT, unix:/PATH (a local unix socket) or any gRPC target; "
       "several replicas comma-separated (A:PORT,B:PORT): @ID operands and tensor commands "
       "go to the replica holding the tensor"},
      {"deadline_ms", "MS", "",
       "deadline of the call in milliseconds (default: health 5000, info 10000, "
       "matmul/transpose/reduce 120000, profile, upload and download 600000)"},
      {"tls_ca", "FILE", "", "PEM root CA; turns TLS on"},
      {"tls_cert", "FILE", "", "PEM client certificate for mutual TLS (with --tls_key)"},
      {"tls_key", "FILE", "", "PEM private key of --tls_cert"},
      {"tls_server_name", "NAME", "", "name to check in the server certificate; turns TLS on"},
      {"tls", "", "", "use TLS with the system's root CAs"},
      {"token_file", "FILE", "", "send the file's first line as 'authorization: Bearer <token>'"},
      {"busy_poll", "", "",
       "wait for each answer by polling instead of sleeping (a busy core; less latency, as "
       "--repeat shows)"},
  };
  return flags;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = [] {
    std::vector<Command> all;
    for (auto group :
         {OpCommands, ProfileCommands, TensorCommands, SharedMemoryCommands, ServerCommands}) {
      for (Command& c : group()) all.push_back(std::move(c));
    }
    return all;
  }();
  return commands;
}

void PrintTopUsage(std::FILE* out) {
  std::fprintf(out,
               "gpucompute: client for the gpucompute GPU matrix service\n\n"
               "usage: gpucompute COMMAND [flags] [args]\n\ncommands:\n");
  for (const Command& c : Commands()) {
    std::fprintf(out, "  %-11s %s\n", c.name.c_str(), c.summary.c_str());
  }
  std::fprintf(out,
               "\n`gpucompute COMMAND --help` lists a command's flags.\n"
               "Inputs and --out are NumPy .npy files (float32 '<f4', float64 '<f8',\n"
               "float16 '<f2', or bfloat16 as NumPy saves it, '<V2'; C order, 1-D read\n"
               "as 1 x N, or 2-D); @ID in place of an input names a tensor held by the\n"
               "server (see upload).\n"
               "Exit codes: 0 ok; 1 the call failed (gRPC code and message on stderr) or\n"
               "--out could not be written; 2 usage error, including unreadable inputs.\n");
}

void PrintCommandUsage(const Command& c) {
  std::printf("usage: gpucompute %s %s\n\n%s\n\nflags:\n%s\nconnection flags:\n%s", c.name.c_str(),
              c.synopsis.c_str(), c.description.c_str(), FormatFlagHelp(c.flags).c_str(),
              FormatFlagHelp(ConnectionFlags()).c_str());
}

absl::StatusOr<ClientOptions> MakeClientOptions(const ParsedArgs& args,
                                                int64_t default_deadline_ms) {
  ClientOptions options;
  options.target = args.Get("server");
  // Replicas, comma-separated; ipv4:/ipv6: targets use commas themselves.
  if (options.target.find(',') != std::string::npos && options.target.rfind("ipv4:", 0) != 0 &&
      options.target.rfind("ipv6:", 0) != 0) {
    options.targets = absl::StrSplit(options.target, ',', absl::SkipEmpty());
  }
  int64_t deadline_ms = default_deadline_ms;
  if (args.Has("deadline_ms")) {
    absl::StatusOr<int64_t> v = ParseInt(args, "deadline_ms", 1);
    if (!v.ok()) return v.status();
    deadline_ms = *v;
  }
  options.deadline = absl::Milliseconds(deadline_ms);
  options.use_tls = args.GetBool("tls");
  options.tls_root_ca_file = args.Get("tls_ca");
  options.tls_cert_file = args.Get("tls_cert");
  options.tls_key_file = args.Get("tls_key");
  options.tls_server_name = args.Get("tls_server_name");
  options.bearer_token_file = args.Get("token_file");
  options.busy_poll = args.GetBool("busy_poll");
  return options;
}

int Main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    PrintTopUsage(stderr);
    return kExitUsage;
  }
  std::string name = words[0];
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && words.size() > 1) {
      name = words[1];
      words = {name, "--help"};
    } else {
      PrintTopUsage(stdout);
      return kExitOk;
    }
  }
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "gpucompute: unknown command '%s'\n\n", name.c_str());
    PrintTopUsage(stderr);
    return kExitUsage;
  }
  absl::StatusOr<ParsedArgs> args =
      ParsedArgs::Parse(std::vector<std::string>(words.begin() + 1, words.end()),
                        Concat(command->flags, ConnectionFlags()));
  if (!args.ok()) {
    std::fprintf(stderr, "gpucompute %s: %s (see gpucompute %s --help)\n", name.c_str(),
                 std::string(args.status().message()).c_str(), name.c_str());
    return kExitUsage;
  }
  if (args->help()) {
    PrintCommandUsage(*command);
    return kExitOk;
  }
  if (!command->takes_files && !args->positional().empty()) {
    std::fprintf(stderr, "gpucompute %s: unexpected argument '%s' (see gpucompute %s --help)\n",
                 name.c_str(), args->positional()[0].c_str(), name.c_str());
    return kExitUsage;
  }
  absl::StatusOr<ClientOptions> options = MakeClientOptions(*args, command->default_deadline_ms);
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<Client> client = Client::Create(*options);
  if (!client.ok()) return UsageError(client.status());
  return command->run(*args, *client);
}

}  // namespace
}  // namespace gpucompute::cli

int main(int argc, char** argv) {
  gpucompute::RetainLargeHostAllocations();  // --repeat reuses the result's pages
  return gpucompute::cli::Main(argc, argv);
}
