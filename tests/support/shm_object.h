// A POSIX shared-memory object as a client on the server's host makes one:
// created under a fresh name, sized, mapped; unmapped and unlinked at the end.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>

namespace gpucompute::testing {

class ShmObject {
 public:
  explicit ShmObject(int64_t bytes) : bytes_(bytes) {
    static std::atomic<int> counter{0};
    key_ = "/gpucompute-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(std::random_device{}());
    fd_ = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd_ < 0 || ftruncate(fd_, bytes) != 0) return;
    void* map = mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (map != MAP_FAILED) data_ = static_cast<char*>(map);
  }
  ~ShmObject() {
    if (data_ != nullptr) munmap(data_, size_t(bytes_));
    if (fd_ >= 0) close(fd_);
    Unlink();
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  bool ok() const { return data_ != nullptr; }
  const std::string& key() const { return key_; }
  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  int fd() const { return fd_; }
  void Unlink() {
    if (!unlinked_) shm_unlink(key_.c_str());
    unlinked_ = true;
  }

 private:
  int64_t bytes_;
  std::string key_;
  int fd_ = -1;
  char* data_ = nullptr;
  bool unlinked_ = false;
};

}  // namespace gpucompute::testing
