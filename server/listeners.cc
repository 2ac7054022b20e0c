// The addresses of --listen and their socket files (listeners.h).
#include "server/listeners.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

// "0.0.0.0:0" with port 12345 chosen -> "0.0.0.0:12345".
std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

constexpr char kUnixPrefix[] = "unix:";
constexpr char kUnixAbstractPrefix[] = "unix-abstract:";

std::string HostName() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 && name[0] != 0 ? name : "localhost";
}

}  // namespace

std::string Listener::Bound() const {
  return kind == Kind::kTcp ? WithPort(address, port) : address;
}

absl::StatusOr<std::vector<Listener>> ParseListenList(const std::string& text) {
  const std::string example = "e.g. 0.0.0.0:50051,unix:/run/gpucompute/gpucompute.sock";
  std::vector<Listener> listeners;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    Listener l;
    l.address = std::string(absl::StripAsciiWhitespace(part));
    if (l.address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--listen: \"", text,
                                                     "\" has an empty address; give a "
                                                     "comma-separated list of addresses, ",
                                                     example));
    }
    absl::string_view rest = l.address;
    if (absl::ConsumePrefix(&rest, kUnixAbstractPrefix)) {
      l.kind = Listener::Kind::kUnixAbstract;
    } else if (absl::ConsumePrefix(&rest, kUnixPrefix)) {
      l.kind = Listener::Kind::kUnix;
      // unix:///abs/path is unix:/abs/path with an empty authority.
      if (absl::ConsumePrefix(&rest, "//") && !absl::StartsWith(rest, "/")) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address,
                         "\": a unix socket is unix:/absolute/path, unix:///absolute/path or "
                         "unix:relative/path"));
      }
    }
    if (!l.is_unix()) {
      // host:port; gRPC would take a port past 65535 modulo 65536.
      const size_t colon = l.address.rfind(':');
      int port = -1;
      if (colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(absl::string_view(l.address).substr(colon + 1), &port) || port < 0 ||
          port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address,
                         "\" is not host:port with a port of 0 to 65535 (0: a free one), "
                         "unix:PATH or unix-abstract:NAME; ",
                         example));
      }
    }
    if (l.is_unix()) {
      l.path = std::string(rest);
      if (l.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address, "\" names no socket, ", example));
      }
      if (l.kind == Listener::Kind::kUnix && l.path.size() >= sizeof(sockaddr_un::sun_path)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--listen: the socket path of \"", l.address, "\" is longer than ",
            sizeof(sockaddr_un::sun_path) - 1, " bytes, the most a unix socket takes"));
      }
    }
    for (const Listener& earlier : listeners) {
      if (earlier.address == l.address) {
        return absl::InvalidArgumentError(
            absl::StrCat("--listen: \"", l.address, "\" is given twice"));
      }
    }
    listeners.push_back(std::move(l));
  }
  return listeners;
}

absl::StatusOr<std::optional<mode_t>> ParseSocketMode(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const bool octal = text.size() <= 5 && text.find_first_not_of("01234567") == std::string::npos;
  const unsigned long mode = octal ? std::strtoul(text.c_str(), nullptr, 8) : 0;
  if (!octal || mode > 0777) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_mode: \"", text,
                     "\" is not an octal permission mode of 0 to 0777 such as 0660 or 0600 "
                     "(no setuid, setgid or sticky bit; empty: leave the socket as created)"));
  }
  return static_cast<mode_t>(mode);
}

absl::Status ClearStaleSocket(const Listener& l) {
  struct stat st;
  if (lstat(l.path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return absl::OkStatus();
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::OkStatus();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::copy(l.path.begin(), l.path.end(), addr.sun_path);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  const int error = errno;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(absl::StrCat("--listen: another server is listening on ",
                                                      l.address, "; not taking its socket"));
  }
  if (error != ECONNREFUSED) return absl::OkStatus();  // e.g. no permission: binding decides
  if (unlink(l.path.c_str()) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("--listen: cannot remove the stale socket ",
                                                      l.path, ": ", std::strerror(errno)));
  }
  LogInfo(absl::StrCat("removed the stale socket ", l.path,
                       " (left by a server that did not stop cleanly)"));
  return absl::OkStatus();
}

absl::Status SetUpSocketFiles(std::vector<Listener>& listeners, std::optional<mode_t> mode) {
  for (Listener& l : listeners) {
    if (l.kind != Listener::Kind::kUnix || l.port == 0) continue;
    if (mode && chmod(l.path.c_str(), *mode) != 0) {
      return absl::InternalError(
          absl::StrCat("--unix_socket_mode: chmod ", l.path, ": ", std::strerror(errno)));
    }
    struct stat st;
    if (lstat(l.path.c_str(), &st) == 0) {
      l.device = st.st_dev;
      l.inode = st.st_ino;
    }
  }
  return absl::OkStatus();
}

void RemoveSocketFiles(const std::vector<Listener>& listeners) {
  for (const Listener& l : listeners) {
    struct stat st;
    if (l.kind == Listener::Kind::kUnix && l.inode != 0 && lstat(l.path.c_str(), &st) == 0 &&
        st.st_dev == l.device && st.st_ino == l.inode) {
      unlink(l.path.c_str());
    }
  }
}

std::string DefaultInstanceName(const std::vector<Listener>& listeners) {
  for (const Listener& l : listeners) {
    if (l.is_unix()) continue;
    std::string host = l.address.substr(0, l.address.rfind(':'));
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = HostName();
    return absl::StrCat(host, ":", l.port);
  }
  const Listener& first = listeners.front();
  return absl::StrCat(HostName(), ":",
                      first.kind == Listener::Kind::kUnix ? first.path : first.address);
}

}  // namespace gpucompute::server
