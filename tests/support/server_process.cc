#include "support/server_process.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_split.h"

extern char** environ;

namespace gpucompute::testing {
namespace {

// GPUCOMPUTE_TEST_CEILINGS, a ceilings file that CTest names, for a CPU
// server whose test gives no --ceilings of its own: then the server skips
// its start-up measurement, which takes every core for about a second, and
// the suites start hundreds of servers. A test of the measurement itself
// passes --ceilings= (none: measure).
std::string CeilingsFlag(const std::vector<std::string>& flags) {
  const char* file = std::getenv("GPUCOMPUTE_TEST_CEILINGS");
  if (file == nullptr || *file == 0) return "";
  bool cpu = false;
  for (const std::string& flag : flags) {
    if (flag.rfind("--ceilings", 0) == 0) return "";
    cpu = cpu || flag == "--backend=cpu";
  }
  return cpu ? std::string("--ceilings=") + file : "";
}

}  // namespace

ServerProcess::ServerProcess(const std::string& built_binary,
                             const std::vector<std::string>& flags) {
  // GPUCOMPUTE_SERVER_BINARY runs a server copied elsewhere (e.g. a bundle).
  const char* override_path = std::getenv("GPUCOMPUTE_SERVER_BINARY");
  const std::string binary = override_path ? override_path : built_binary;
  int out[2];
  if (pipe(out) != 0) return;
  // GPUCOMPUTE_SERVER_WRAPPER runs the server under a tool, e.g.
  // "compute-sanitizer --tool memcheck --log-file /tmp/memcheck.%p.log".
  std::vector<std::string> args = absl::StrSplit(
      std::getenv("GPUCOMPUTE_SERVER_WRAPPER") ? std::getenv("GPUCOMPUTE_SERVER_WRAPPER") : "", ' ',
      absl::SkipEmpty());
  wrapped_ = !args.empty();
  args.push_back(binary);
  args.push_back("--listen=127.0.0.1:0");
  args.insert(args.end(), flags.begin(), flags.end());
  if (const std::string ceilings = CeilingsFlag(flags); !ceilings.empty()) args.push_back(ceilings);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const int rc = posix_spawnp(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    pid_ = -1;
    close(out[0]);
    return;
  }
  // The server prints "gpucompute-server listening on HOST:PORT" once serving.
  FILE* f = fdopen(out[0], "r");
  char line[512];
  const std::string marker = "listening on ";
  while (f && std::fgets(line, sizeof line, f)) {
    std::string s(line);
    const size_t at = s.find(marker);
    if (at != std::string::npos) {
      target_ = s.substr(at + marker.size());
      while (!target_.empty() && (target_.back() == '\n' || target_.back() == '\r'))
        target_.pop_back();
      break;
    }
  }
  if (f) std::fclose(f);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

// The server a wrapper started: the wrapper's child, where /proc says so.
pid_t WrappedChild(pid_t wrapper) {
  std::ifstream children("/proc/" + std::to_string(wrapper) + "/task/" + std::to_string(wrapper) +
                         "/children");
  pid_t child = -1;
  return children >> child ? child : -1;
}

int ServerProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  // A wrapped server is stopped itself, and politely, so that its wrapper
  // sees it end and writes its report.
  const pid_t child = wrapped_ ? WrappedChild(pid_) : -1;
  if (child > 0) {
    kill(child, signal == SIGKILL ? SIGTERM : signal);
  } else {
    kill(pid_, signal);
  }
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace gpucompute::testing
