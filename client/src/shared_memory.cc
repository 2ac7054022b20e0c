#include "gpucompute/shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client_core.h"
#include "gpucompute/client.h"

namespace gpucompute {
namespace {

std::string FreshKey() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("/gpucompute-", getpid(), "-", counter++, "-", std::random_device{}());
}

}  // namespace

absl::StatusOr<SharedMemoryRegion> SharedMemoryRegion::Create(const Client& client, int64_t bytes,
                                                              std::string name) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SharedMemoryRegion: bytes must be >= 1, got ", bytes));
  }
  SharedMemoryRegion region;
  region.key_ = FreshKey();
  region.name_ = name.empty() ? region.key_.substr(1) : std::move(name);
  region.bytes_ = bytes;
  // Readable and writable by this user only: the server must run as the
  // same user (or as root) to open it.
  region.fd_ = shm_open(region.key_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (region.fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("shm_open ", region.key_, " failed: ", std::strerror(errno)));
  }
  if (ftruncate(region.fd_, off_t(bytes)) != 0) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat("sizing shared memory ", region.key_, " to ",
                                                     bytes, " bytes: ", std::strerror(error)));
  }
  void* map = mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, region.fd_, 0);
  if (map == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("mapping shared memory ", region.key_, ": ", std::strerror(errno)));
  }
  region.data_ = static_cast<char*>(map);
  v1::RegisterSharedMemoryRequest request;
  request.set_name(region.name_);
  request.set_key(region.key_);
  request.set_byte_size(bytes);
  auto registered = client.RegisterSharedMemory(request);
  if (!registered.ok()) return registered.status();  // the destructor unmaps and unlinks
  region.pinned_ = registered->pinned();
  region.core_ = client.core_;
  return region;
}

SharedMemoryRegion::SharedMemoryRegion(SharedMemoryRegion&& other) noexcept
    : core_(std::move(other.core_)),
      name_(std::move(other.name_)),
      key_(std::move(other.key_)),
      bytes_(other.bytes_),
      pinned_(other.pinned_),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)) {
  other.key_.clear();
}

SharedMemoryRegion& SharedMemoryRegion::operator=(SharedMemoryRegion&& other) noexcept {
  if (this != &other) {
    (void)Close();
    core_ = std::move(other.core_);
    name_ = std::move(other.name_);
    key_ = std::move(other.key_);
    other.key_.clear();
    bytes_ = other.bytes_;
    pinned_ = other.pinned_;
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

SharedMemoryRegion::~SharedMemoryRegion() { (void)Close(); }

absl::Status SharedMemoryRegion::Close() {
  absl::Status status;
  if (core_ != nullptr) {
    v1::UnregisterSharedMemoryRequest request;
    request.set_name(name_);
    v1::UnregisterSharedMemoryResponse response;
    grpc::ClientContext context;
    core_->Prepare(&context);
    status = core_->Finish("UnregisterSharedMemory",
                           core_->stub->UnregisterSharedMemory(&context, request, &response));
    core_.reset();
  }
  Unmap();
  return status;
}

void SharedMemoryRegion::Unmap() {
  if (data_ != nullptr) munmap(data_, size_t(bytes_));
  data_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!key_.empty()) shm_unlink(key_.c_str());
  key_.clear();
}

absl::StatusOr<SharedMemoryView> SharedMemoryRegion::View(DType dtype, int64_t rows, int64_t cols,
                                                          int64_t offset) const {
  absl::StatusOr<int64_t> size = MatrixByteSize(dtype, rows, cols);
  if (!size.ok()) return size.status();
  if (data_ == nullptr) return absl::FailedPreconditionError("View: the region is closed");
  if (offset < 0 || offset > bytes_ || *size > bytes_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "View: ", rows, " x ", cols, " ", DTypeName(dtype), " (", *size, " bytes) at offset ",
        offset, " does not fit region \"", name_, "\" of ", bytes_, " bytes"));
  }
  return SharedMemoryView{name_, offset, dtype, rows, cols, data_ + offset};
}

}  // namespace gpucompute
