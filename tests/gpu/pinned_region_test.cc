// A client's shared-memory object truncated or unlinked while registered
// and pinned: every copy the server then makes from or into the region
// (DMA where SharedMemoryRegion::dma_data allows it, the file otherwise)
// leaves the server alive. Each case runs in a child process, since a
// failure is a SIGBUS; the parent never touches CUDA, so children can.
// The driver behaviour this guards against, seen on an H200: a
// host-to-device cudaMemcpy of up to 4 KiB from registered memory is done
// with the CPU, through the mapping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "absl/time/clock.h"
#include "server/cuda/cuda_device.h"
#include "server/engine/shared_memory.h"

namespace gpucompute::server {
namespace {

constexpr int kNoGpu = 77;
constexpr int64_t kObjectBytes = int64_t{2} << 20;

// Runs `body` in a child; returns its exit code, or 128 + the signal that
// killed it.
int InChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

bool HaveGpu() {
  return InChild([] {
           int n = 0;
           return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : kNoGpu;
         }) == 0;
}

enum class Shrink { kTo4096, kToZero, kUnlinked };

// In the child: a 2 MiB object, registered and pinned through the server's
// own region code, then shrunk; every slice is then copied up and down as
// the server would. Prints each case before it runs, so a death names it.
int CopiesAfterShrinking(Shrink shrink) {
  const std::string key = "/gpucompute-pinned-" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, kObjectBytes) != 0) return 2;
  std::vector<char> pattern(size_t(kObjectBytes), 7);
  if (pwrite(fd, pattern.data(), pattern.size(), 0) != kObjectBytes) return 3;
  CudaDeviceOptions options;
  options.streams_per_device = 1;
  auto device = cuda::OpenCudaDevice(0, options);
  if (!device.ok()) return 4;
  auto region = SharedMemoryRegion::Open({"victim", key, 0, kObjectBytes, false}, device->get());
  if (!region.ok() || !(*region)->pinned()) return 5;
  switch (shrink) {
    case Shrink::kTo4096: ftruncate(fd, 4096); break;
    case Shrink::kToZero: ftruncate(fd, 0); break;
    case Shrink::kUnlinked: break;
  }
  shm_unlink(key.c_str());
  close(fd);
  auto resident = (*device)->AllocateResident(kObjectBytes, absl::Now() + absl::Seconds(10));
  if (!resident.ok()) return 6;
  const int64_t min_dma = SharedMemoryRegion::kMinDmaBytes;
  for (int64_t offset : {int64_t{0}, int64_t{3968}, int64_t{524288}}) {
    for (int64_t bytes :
         {int64_t{256}, int64_t{4096}, int64_t{65536}, min_dma, min_dma + 4, int64_t{1} << 20}) {
      std::fprintf(stderr, "case offset %lld bytes %lld\n", (long long)offset, (long long)bytes);
      std::vector<char> copy(static_cast<size_t>(bytes));
      if (char* dma = (*region)->dma_data(offset, bytes)) {
        const HostPieces src{{dma, size_t(bytes)}};
        if (!(*device)->WriteResident(**resident, 0, src, true).ok()) return 10;
        if (!(*device)->ReadResident(**resident, 0, bytes, dma, true).ok()) return 11;
      } else {
        // Through the file: a read past the new end fails, never faults (a
        // write past it grows the object again).
        (*region)->Read(offset, bytes, copy.data()).IgnoreError();
        (*region)->Write(offset, copy.data(), bytes).IgnoreError();
      }
    }
  }
  region->reset();  // unpins and unmaps the shrunk object
  return 0;
}

class PinnedRegionTest : public ::testing::TestWithParam<Shrink> {};

TEST_P(PinnedRegionTest, EveryCopyOfAShrunkRegionLeavesTheServerAlive) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  const Shrink shrink = GetParam();
  EXPECT_EQ(InChild([shrink] { return CopiesAfterShrinking(shrink); }), 0)
      << "the last case printed above is the one that failed (exit 128 + 7: SIGBUS)";
}

INSTANTIATE_TEST_SUITE_P(Shrinks, PinnedRegionTest,
                         ::testing::Values(Shrink::kTo4096, Shrink::kToZero, Shrink::kUnlinked),
                         [](const auto& info) {
                           switch (info.param) {
                             case Shrink::kTo4096: return std::string("TruncatedTo4096");
                             case Shrink::kToZero: return std::string("TruncatedToZero");
                             case Shrink::kUnlinked: return std::string("Unlinked");
                           }
                           return std::string();
                         });

}  // namespace
}  // namespace gpucompute::server
