// gpucompute-transfer-bench: what the server's request path gets for moving
// payloads between pageable host memory (where gRPC leaves them) and the
// device, against plain cudaMemcpy from the same pageable buffers, measured
// in one process. Usage: gpucompute-transfer-bench [MiB ...] (default 64).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpucompute/common/stats.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/staging.h"

namespace {

using Clock = std::chrono::steady_clock;

// Wall-clock time, not CUDA events: each copy is synchronous from the host's
// point of view (pageable cudaMemcpy, staging through host threads), which is
// what a request waits for.
template <typename F>
double MedianSeconds(F&& body, int reps = 9) {
  body();  // warm-up: first touch, driver staging set-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    body();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return gpucompute::common::Median(t);
}

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpucompute::server::cuda;
  std::vector<size_t> sizes_mib;
  for (int i = 1; i < argc; ++i) sizes_mib.push_back(std::strtoul(argv[i], nullptr, 10));
  if (sizes_mib.empty()) sizes_mib = {64};

  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::atomic<int64_t> host_allocs{0};
  auto staging = StagingBuffers::Create(host_allocs);
  if (!staging.ok()) {
    std::fprintf(stderr, "%s\n", std::string(staging.status().message()).c_str());
    return 1;
  }
  HostCopyPool copier(6);

  std::printf("%-8s %-10s %14s %14s %8s\n", "MiB", "direction", "pageable GB/s", "staged GB/s",
              "ratio");
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20;
    std::vector<char> src(bytes), dst(bytes);
    for (size_t i = 0; i < bytes; i += 4096) src[i] = char(i * 2654435761u >> 24);
    void* device = nullptr;
    Check(cudaMalloc(&device, bytes), "cudaMalloc");

    const double pageable_up = MedianSeconds([&] {
      Check(cudaMemcpy(device, src.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    });
    const double staged_up = MedianSeconds([&] {
      if (!(*staging)
               ->Upload(device, {absl::Span<const char>(src.data(), bytes)}, stream, copier)
               .ok()) {
        std::exit(1);
      }
      Check(cudaStreamSynchronize(stream),
            "upload wait");  // Upload returns before the last DMA ends
    });
    const double pageable_down = MedianSeconds([&] {
      Check(cudaMemcpy(dst.data(), device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    });
    const double staged_down = MedianSeconds([&] {
      if (!(*staging)->Download(dst.data(), device, bytes, stream, copier).ok()) std::exit(1);
    });
    const bool same = std::equal(src.begin(), src.end(), dst.begin());
    auto row = [&](const char* dir, double pageable, double staged) {
      std::printf("%-8zu %-10s %14.2f %14.2f %8.2f\n", mib, dir, bytes / pageable / 1e9,
                  bytes / staged / 1e9, pageable / staged);
    };
    row("upload", pageable_up, staged_up);
    row("download", pageable_down, staged_down);
    if (!same) {
      std::fprintf(stderr, "round trip through staging changed the data\n");
      return 1;
    }
    cudaFree(device);
  }
  return 0;
}
