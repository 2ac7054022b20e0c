// Starts the real gpucompute-server binary on an ephemeral loopback port for
// end-to-end tests, and stops it with a signal.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>

namespace gpucompute::testing {

class ServerProcess {
 public:
  // Starts `binary` with --listen=127.0.0.1:0 plus `flags` and waits until it
  // prints its address. Check started() before use.
  ServerProcess(const std::string& binary, const std::vector<std::string>& flags);
  ~ServerProcess();

  bool started() const { return !target_.empty(); }
  const std::string& target() const { return target_; }  // "127.0.0.1:PORT"
  pid_t pid() const { return pid_; }
  // Runs under GPUCOMPUTE_SERVER_WRAPPER: pid() and Stop()'s status are the
  // wrapper's.
  bool wrapped() const { return wrapped_; }

  // Sends `signal` and waits for the exit; returns the exit status (or
  // 128 + signal number when killed by one). Under a wrapper, the server
  // gets the signal (SIGTERM for SIGKILL) and the wrapper's status returns.
  int Stop(int signal);

 private:
  pid_t pid_ = -1;
  bool wrapped_ = false;  // pid_ is GPUCOMPUTE_SERVER_WRAPPER's, the server its child
  std::string target_;
};

}  // namespace gpucompute::testing
