#include "support/server_process.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace gpucompute::testing {

ServerProcess::ServerProcess(const std::string& built_binary,
                             const std::vector<std::string>& flags) {
  // GPUCOMPUTE_SERVER_BINARY runs a server copied elsewhere (e.g. a bundle).
  const char* override_path = std::getenv("GPUCOMPUTE_SERVER_BINARY");
  const std::string binary = override_path ? override_path : built_binary;
  int out[2];
  if (pipe(out) != 0) return;
  std::vector<std::string> args = {binary, "--listen=127.0.0.1:0"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const int rc = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
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

int ServerProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

}  // namespace gpucompute::testing
