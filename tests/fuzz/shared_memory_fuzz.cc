// The shared-memory registry on what a client sends: region names, shm_open
// keys, offsets and sizes from RegisterSharedMemory, slices from ops, and an
// object that shrinks or grows between calls. One real object exists; keys
// either name it or are arbitrary bytes. Nothing may crash, leak or read
// outside a region, and a read past a shrunk end must be an error.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "server/engine/shared_memory.h"
#include "server/ops/log.h"

namespace {

using gpucompute::server::SharedMemoryOptions;
using gpucompute::server::SharedMemoryRegionInfo;
using gpucompute::server::SharedMemoryRegistry;

constexpr int64_t kObjectBytes = 64 * 1024;

// Bytes consumed from the front of the input.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return size_ == 0; }
  uint8_t Byte() { return size_ > 0 ? (--size_, *data_++) : 0; }
  int64_t Number() {
    // Mostly small, around the object's size; sometimes any 64-bit value.
    const uint8_t kind = Byte();
    int64_t v = 0;
    for (int i = 0; i < (kind & 0x80 ? 8 : 3); ++i) v = (v << 8) | Byte();
    return kind & 0x40 ? int64_t(0 - uint64_t(v)) : v;  // INT64_MIN included
  }
  std::string Text() {
    const size_t n = std::min<size_t>(Byte() % 24, size_);
    std::string s(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

struct Object {
  Object() {
    key = "/gpucompute-fuzz-" + std::to_string(getpid());
    fd = shm_open(key.c_str(), O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, kObjectBytes) != 0) __builtin_trap();
  }
  ~Object() {
    close(fd);
    shm_unlink(key.c_str());
  }
  std::string key;
  int fd = -1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Object* object = [] {
    (void)gpucompute::server::SetLogLevel("error");  // no log line per refused region
    return new Object();
  }();
  Input in(data, size);
  if (ftruncate(object->fd, kObjectBytes) != 0) __builtin_trap();
  SharedMemoryRegistry registry(SharedMemoryOptions{4, 1 << 20}, /*pinner=*/nullptr);
  std::vector<char> buffer;
  while (!in.empty()) {
    switch (in.Byte() % 6) {
      case 0: {  // Register
        SharedMemoryRegionInfo asked;
        asked.name = in.Text();
        asked.key = in.Byte() % 4 == 0 ? in.Text() : object->key;
        asked.offset = in.Number();
        asked.byte_size = in.Number();
        auto info = registry.Register(asked);
        if (info.ok() && (info->offset < 0 || info->byte_size < 1 ||
                          info->offset + info->byte_size > kObjectBytes)) {
          __builtin_trap();  // registered past the object
        }
        break;
      }
      case 1: (void)registry.Unregister(in.Byte() % 2 ? "" : in.Text()); break;
      case 2:
      case 3: {  // a slice read or written, as an op would
        auto region = registry.Find(in.Text(), "a.shared_memory");
        if (!region.ok()) break;
        const int64_t offset = in.Number(), bytes = in.Number();
        if (!(*region)->CheckSlice(offset, bytes, "a.shared_memory").ok()) break;
        if (offset < 0 || bytes < 0 || offset + bytes > (*region)->info().byte_size) {
          __builtin_trap();  // a slice outside its region passed
        }
        buffer.resize(size_t(bytes));
        if (in.Byte() % 2) {
          (void)(*region)->Read(offset, bytes, buffer.data());
        } else {
          (void)(*region)->Write(offset, buffer.data(), bytes);
        }
        break;
      }
      case 4: {  // the client shrinks or regrows its object
        const int64_t to = in.Byte() % 2 ? 0 : kObjectBytes;
        if (ftruncate(object->fd, to) != 0) __builtin_trap();
        break;
      }
      case 5: (void)registry.List(); break;
    }
  }
  return 0;
}
