// The addresses of --listen: each classified (TCP, unix socket file, abstract
// unix socket), checked, and for socket files their permissions set once
// bound and the files removed at exit.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpucompute::server {

// One address of --listen.
struct Listener {
  std::string address;  // as given: "0.0.0.0:0", "unix:/run/x.sock", "unix-abstract:x"
  enum class Kind { kTcp, kUnix, kUnixAbstract } kind = Kind::kTcp;
  std::string path;  // kUnix: the socket file; kUnixAbstract: the name
  int port = 0;      // set by gRPC once bound (nonzero means bound, also for unix sockets)
  // kUnix: the socket file this server bound, so that only it is removed at exit.
  dev_t device = 0;
  ino_t inode = 0;

  bool is_unix() const { return kind != Kind::kTcp; }
  // The address with the port bound: what clients dial.
  std::string Bound() const;
};

// --listen: a comma-separated list. gRPC reads each address itself; here an
// address is only classified, its unix path taken out, and the list checked
// for empty elements and repeats.
absl::StatusOr<std::vector<Listener>> ParseListenList(const std::string& text);

// --unix_socket_mode: an octal mode such as 0660; empty: none.
absl::StatusOr<std::optional<mode_t>> ParseSocketMode(const std::string& text);

// A socket file already at a unix address. gRPC unlinks any socket at the
// path before it binds, a running server's too (which would silently lose
// its clients to this one); so a server still answering there keeps it and
// this one fails to start, as a second server on a TCP port does. One left by
// a server that died without cleaning up (nothing answers) is removed.
// Anything else at the path (a regular file, a directory) is left alone:
// binding fails.
absl::Status ClearStaleSocket(const Listener& l);

// Once bound: the mode of each unix socket file bound, and its identity for
// the clean-up at exit.
absl::Status SetUpSocketFiles(std::vector<Listener>& listeners, std::optional<mode_t> mode);

// At exit: the socket files this server bound, unless another took the path.
void RemoveSocketFiles(const std::vector<Listener>& listeners);

// host:port of the first TCP address with the port bound; a wildcard host
// (0.0.0.0, [::], none) becomes the machine's name, which peers can reach.
// With unix sockets only, the machine's name and the first socket's path
// ("host:/run/gpucompute/gpucompute.sock"; "host:unix-abstract:NAME"): a path
// alone would name the servers of every machine alike.
std::string DefaultInstanceName(const std::vector<Listener>& listeners);

}  // namespace gpucompute::server
