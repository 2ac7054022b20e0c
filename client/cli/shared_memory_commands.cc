// regions and unregister: the shared-memory regions registered with a server
// on this host. Ops register their own for one call with --shm; these list
// what is registered and clear what a crashed process left behind.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "command.h"

namespace gpucompute::cli {

namespace {

int RunRegions(const ParsedArgs&, const Client& client) {
  absl::StatusOr<v1::ListSharedMemoryResponse> list = client.ListSharedMemory();
  if (!list.ok()) return CallFailed(list.status());
  std::printf("%-24s  %-24s  %12s  %12s  %s\n", "name", "key", "offset", "bytes", "pinned");
  for (const v1::SharedMemoryRegion& r : list->regions()) {
    std::printf("%-24s  %-24s  %12" PRId64 "  %12" PRId64 "  %s\n", r.name().c_str(),
                r.key().c_str(), r.offset(), r.byte_size(), r.pinned() ? "yes" : "no");
  }
  std::printf("%d region%s\n", list->regions_size(), list->regions_size() == 1 ? "" : "s");
  return kExitOk;
}

int RunUnregister(const ParsedArgs& args, const Client& client) {
  const bool all = args.GetBool("all");
  if (all == !args.positional().empty()) {
    return UsageError(absl::InvalidArgumentError(
        "expected region names, or --all for every region (and not both)"));
  }
  // "" asks the server to unregister every region.
  const std::vector<std::string> names = all ? std::vector<std::string>{""} : args.positional();
  int64_t unregistered = 0;
  for (const std::string& name : names) {
    absl::StatusOr<int64_t> n = client.UnregisterSharedMemory(name);
    if (!n.ok()) return CallFailed(n.status());
    unregistered += *n;
  }
  std::printf("unregistered  %" PRId64 "\n", unregistered);
  // A name the server did not hold is not an error of the call, but a
  // script should notice.
  return all || unregistered == static_cast<int64_t>(names.size()) ? kExitOk : kExitFailed;
}

}  // namespace

std::vector<Command> SharedMemoryCommands() {
  return {
      {"regions",
       "list the shared-memory regions registered with the server",
       "[flags]",
       false,
       "Lists the shared-memory regions registered with the server (it must run on\n"
       "this host with --allow_shared_memory): name, object key, offset, size and\n"
       "whether the GPUs pinned it. Ops with --shm register their own for one call.",
       {},
       10000,
       RunRegions},
      {"unregister",
       "unregister shared-memory regions (e.g. a crashed process's)",
       "[flags] (NAME... | --all)",
       true,
       "Unregisters the named regions, or every region with --all. The objects\n"
       "themselves stay: their owner unlinks them. Exits 1 when some name was not\n"
       "registered.",
       {{"all", "", "", "unregister every region on the server"}},
       10000,
       RunUnregister},
  };
}

}  // namespace gpucompute::cli
