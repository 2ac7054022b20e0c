#include "server/engine/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/engine/device.h"
#include "server/ops/log.h"

namespace gpucompute::server {
namespace {

constexpr size_t kMaxNameLength = 255;

absl::Status CheckName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("name: must be 1 to ", kMaxNameLength, " characters, got ", name.size()));
  }
  for (unsigned char c : name) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "name: printable ASCII without spaces only (it appears in logs and listings)");
    }
  }
  return absl::OkStatus();
}

// shm_open's portable form: one leading slash and no other.
absl::Status CheckKey(const std::string& key) {
  if (key.size() < 2 || key.size() > kMaxNameLength || key[0] != '/' ||
      key.find('/', 1) != std::string::npos || key.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: a shm_open name is \"/\" and 1 to ", kMaxNameLength - 1,
                     " characters with no other \"/\", e.g. \"/myapp-0\"; got \"", key, "\""));
  }
  return absl::OkStatus();
}

absl::Status OpenError(int error, const std::string& key) {
  const std::string what =
      absl::StrCat("key \"", key, "\": shm_open failed: ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(what + " (no such shared-memory object)");
  if (error == EACCES || error == EPERM) {
    return absl::PermissionDeniedError(
        what + " (the server's user needs read and write access to the object)");
  }
  return absl::FailedPreconditionError(what);
}

}  // namespace

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegion::Open(
    SharedMemoryRegionInfo info, Device* pinner) {
  const int fd = shm_open(info.key.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return OpenError(errno, info.key);
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("key \"", info.key, "\": not a regular shared-memory object"));
  }
  if (info.offset > int64_t(st.st_size) || info.byte_size > int64_t(st.st_size) - info.offset) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "offset, byte_size: ", info.offset, " + ", info.byte_size, " bytes runs past object \"",
        info.key, "\" of ", int64_t(st.st_size), " bytes"));
  }
  // mmap wants a page-aligned file offset: map from the page holding the
  // region's first byte.
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_offset = info.offset / page * page;
  const size_t map_bytes = size_t(info.offset - map_offset + info.byte_size);
  void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(map_offset));
  if (map == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("key \"", info.key, "\": cannot map ",
                                                     map_bytes, " bytes: ", std::strerror(error)));
  }
  char* data = static_cast<char*>(map) + (info.offset - map_offset);
  info.pinned = false;
  if (pinner != nullptr) {
    auto pinned = pinner->PinHostMemory(data, info.byte_size);
    if (pinned.ok()) {
      info.pinned = *pinned;
    } else {
      // Still usable: ops copy through the file and staging instead.
      LogWarning(absl::StrCat("shared memory \"", info.name, "\" (", info.key,
                              "): not pinned: ", pinned.status().message()));
    }
  }
  Device* unpinner = info.pinned ? pinner : nullptr;
  return std::shared_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(std::move(info), fd, map, map_bytes, data, unpinner));
}

SharedMemoryRegion::SharedMemoryRegion(SharedMemoryRegionInfo info, int fd, void* map,
                                       size_t map_bytes, char* data, Device* pinner)
    : info_(std::move(info)),
      fd_(fd),
      map_(map),
      map_bytes_(map_bytes),
      data_(data),
      pinner_(pinner) {}

SharedMemoryRegion::~SharedMemoryRegion() {
  if (pinner_ != nullptr) pinner_->UnpinHostMemory(data_);
  munmap(map_, map_bytes_);
  close(fd_);
}

absl::Status SharedMemoryRegion::CheckSlice(int64_t offset, int64_t bytes,
                                            const std::string& field) const {
  if (offset < 0 || bytes < 0 || offset > info_.byte_size || bytes > info_.byte_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": offset ", offset, " + byte_size ",
                                                   bytes, " lies outside region \"", info_.name,
                                                   "\" of ", info_.byte_size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Read(int64_t offset, int64_t bytes, void* dst) const {
  char* out = static_cast<char*>(dst);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        pread(fd_, out + done, size_t(bytes - done), off_t(info_.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shared memory \"", info_.name, "\": object \"", info_.key, "\" ",
                       n == 0 ? "shrank below the region while registered" : std::strerror(errno),
                       " (read ", done, " of ", bytes, " bytes)"));
    }
    done += n;
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Write(int64_t offset, const void* src, int64_t bytes) const {
  const char* in = static_cast<const char*>(src);
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        pwrite(fd_, in + done, size_t(bytes - done), off_t(info_.offset + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("shared memory \"", info_.name, "\": writing object \"", info_.key,
                       "\": ", n == 0 ? "no progress" : std::strerror(errno)));
    }
    done += n;
  }
  return absl::OkStatus();
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryOptions options, Device* pinner)
    : options_(options), pinner_(pinner) {}

SharedMemoryRegistry::~SharedMemoryRegistry() {
  auto released = Unregister("");
  if (released.ok() && *released > 0) {
    LogInfo(absl::StrCat("shared memory: ", *released, " regions unregistered at shutdown"));
  }
}

absl::StatusOr<SharedMemoryRegionInfo> SharedMemoryRegistry::Register(
    const SharedMemoryRegionInfo& asked) {
  if (auto s = CheckName(asked.name); !s.ok()) return s;
  if (auto s = CheckKey(asked.key); !s.ok()) return s;
  if (asked.offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat("offset: must be >= 0, got ", asked.offset));
  }
  if (asked.byte_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size: must be >= 1, got ", asked.byte_size));
  }
  {
    // Claim the name and the bytes first, so a slow open and pin (10 ms per
    // 256 MiB) holds no lock.
    absl::MutexLock lock(&mu_);
    if (regions_.count(asked.name) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("name: region \"", asked.name, "\" is already registered"));
    }
    if (int64_t(regions_.size()) >= options_.max_regions) {
      return absl::ResourceExhaustedError(absl::StrCat("shared memory: ", regions_.size(),
                                                       " regions registered, the most ",
                                                       "--shared_memory_max_regions allows"));
    }
    if (asked.byte_size > options_.max_bytes - bytes_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("byte_size: ", asked.byte_size, " bytes asked with ", bytes_,
                       " registered would pass --shared_memory_max_bytes=", options_.max_bytes));
    }
    regions_[asked.name] = nullptr;  // claimed, opening
    bytes_ += asked.byte_size;
  }
  auto region = SharedMemoryRegion::Open(asked, pinner_);
  absl::MutexLock lock(&mu_);
  if (!region.ok()) {
    regions_.erase(asked.name);
    bytes_ -= asked.byte_size;
    return region.status();
  }
  regions_[asked.name] = *region;
  return (*region)->info();
}

absl::StatusOr<int64_t> SharedMemoryRegistry::Unregister(const std::string& name) {
  std::vector<std::shared_ptr<SharedMemoryRegion>> released;  // let go outside the lock
  {
    absl::MutexLock lock(&mu_);
    if (name.empty()) {
      for (auto it = regions_.begin(); it != regions_.end();) {
        if (it->second == nullptr) {  // still opening: its Register finishes it
          ++it;
          continue;
        }
        bytes_ -= it->second->info().byte_size;
        released.push_back(std::move(it->second));
        it = regions_.erase(it);
      }
    } else {
      auto it = regions_.find(name);
      if (it == regions_.end() || it->second == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("name: no shared-memory region \"", name, "\" is registered"));
      }
      bytes_ -= it->second->info().byte_size;
      released.push_back(std::move(it->second));
      regions_.erase(it);
    }
  }
  return int64_t(released.size());
}

absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> SharedMemoryRegistry::Find(
    const std::string& name, const std::string& field) const {
  // Shared: every call on shared memory finds its regions here.
  absl::ReaderMutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(field, ": no shared-memory region \"", name, "\" is registered"));
  }
  return it->second;
}

std::vector<SharedMemoryRegionInfo> SharedMemoryRegistry::List() const {
  std::vector<SharedMemoryRegionInfo> out;
  absl::ReaderMutexLock lock(&mu_);
  for (const auto& [name, region] : regions_) {
    if (region != nullptr) out.push_back(region->info());
  }
  return out;
}

int64_t SharedMemoryRegistry::registered_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return bytes_;
}

}  // namespace gpucompute::server
