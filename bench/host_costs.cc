// gpucompute-host-costs: what the host pays, in microseconds, for each step
// a small request takes on a GPU server: the CUDA runtime calls of one
// request (events, a stream-ordered allocation, a cuBLAS launch, the whole
// upload-compute-download sequence of a 64x64 MatMul), a random tensor id,
// and handing work to another thread that sleeps or that polls. Medians
// (and p90) of --iterations timed repetitions after a warm-up, on the
// host's steady clock. Measured on the host that serves, these say how much
// of a request's time beyond its GPU time is the runtime, and how much is
// threads waking up. Last, how many such requests per second 1 to 16
// threads issue at once (as the server's slots do), call by call or
// replayed from CUDA graphs: whether the driver lets them scale, and whether
// they scale further when the host waits on a flag the stream writes into
// mapped host memory instead of in cudaEventSynchronize.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "check_cuda.h"
#include "gpucompute/common/cpu_relax.h"
#include "gpucompute/common/stats.h"
#include "gpucompute/common/time.h"

ABSL_FLAG(int32_t, iterations, 2000, "timed repetitions of each step");
ABSL_FLAG(int32_t, device, 0, "CUDA device ordinal");

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double p50_us, p90_us;
};

// Times `step` `iterations` times (after a tenth as many untimed); `step`
// may move the start of its timing past a setup of its own.
Stats Time(int iterations, const std::function<void(Clock::time_point&)>& step) {
  Clock::time_point start;
  for (int i = 0; i < std::max(1, iterations / 10); ++i) step(start);
  std::vector<double> us(size_t(iterations), 0.0);
  for (double& u : us) {
    start = Clock::now();
    step(start);
    u = gpucompute::common::MicrosSince(start);
  }
  return {gpucompute::common::Median(us), gpucompute::common::Percentile(us, 90)};
}

void Row(const char* what, Stats s) {
  std::printf("%-58s %9.2f %9.2f\n", what, s.p50_us, s.p90_us);
}

// A round trip to another thread: it wakes, answers, and this one wakes.
// Sleeping: both wait on a condition variable (a futex each way). Polling:
// both spin on an atomic. `idle`: how long the other thread has waited
// before each round trip (untimed), as a worker waits between requests.
Stats HandOff(int iterations, bool poll, std::chrono::microseconds idle) {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> turn{0};  // even: the other thread's move; odd: ours
  std::atomic<bool> stop{false};
  std::thread other([&] {
    for (int seen = 0;; seen += 2) {
      if (poll) {
        while (turn.load(std::memory_order_acquire) != seen + 1 && !stop.load()) {
        }
      } else {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return turn.load() == seen + 1 || stop.load(); });
      }
      if (stop.load()) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        turn.store(seen + 2, std::memory_order_release);
      }
      if (!poll) cv.notify_all();
    }
  });
  int at = 0;
  Stats s = Time(iterations, [&](Clock::time_point& start) {
    const auto until = Clock::now() + idle;
    while (Clock::now() < until) {
    }
    start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu);
      turn.store(at + 1, std::memory_order_release);
    }
    if (poll) {
      while (turn.load(std::memory_order_acquire) != at + 2) {
      }
    } else {
      cv.notify_all();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return turn.load() == at + 2; });
    }
    at += 2;
  });
  {
    std::lock_guard<std::mutex> lock(mu);
    stop.store(true);
  }
  cv.notify_all();
  other.join();
  return s;
}

using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// The driver's cuStreamWriteValue32, found through the runtime (nothing
// links the driver library); null where the driver lacks it.
WriteValue32 FindWriteValue32() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                       &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<WriteValue32>(fn);
}

// 64^3 MatMul requests as a server slot runs them, from `threads` threads
// at once, each with its own stream, cuBLAS handle, buffers and events:
// (with `copies`, both inputs up in one copy,) the sgemm, (the result down,)
// four marks, one host wait and three stage times; queued call by call, or
// replayed from a CUDA graph of the same work (`graph`). With `flag`, the
// stream then writes 1 into a mapped host word the host cleared before, and
// the host polls that word instead of calling cudaEventSynchronize.
// Requests per second, all threads together, over `seconds`; -1 where the
// driver refuses the flag write (or its capture).
double RequestsPerSecond(int threads, bool graph, bool copies, double seconds, bool flag = false) {
  static const WriteValue32 write_value = FindWriteValue32();
  if (flag && write_value == nullptr) return -1;
  std::atomic<bool> refused{false};
  constexpr int kSide = 64;
  constexpr size_t kMatrixBytes = size_t(kSide) * kSide * sizeof(float);
  constexpr size_t kWorkspaceBytes = size_t{4} << 20;
  std::atomic<int> ready{0};
  std::atomic<int64_t> total{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      cudaStream_t stream;
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      cublasHandle_t cublas;
      if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) std::exit(1);
      cublasSetStream(cublas, stream);
      cublasSetMathMode(cublas, CUBLAS_PEDANTIC_MATH);
      float *host_in, *host_out, *dev;
      void* workspace;
      CHECK_CUDA(cudaMallocHost(&host_in, 2 * kMatrixBytes));
      CHECK_CUDA(cudaMallocHost(&host_out, kMatrixBytes));
      CHECK_CUDA(cudaMalloc(&dev, 3 * kMatrixBytes));
      CHECK_CUDA(cudaMalloc(&workspace, kWorkspaceBytes));
      cublasSetWorkspace(cublas, workspace, kWorkspaceBytes);  // none allocated in a capture
      for (size_t i = 0; i < 2 * kSide * kSide; ++i) host_in[i] = float(i % 7) - 3.0f;
      cudaEvent_t marks[4];
      for (cudaEvent_t& e : marks) CHECK_CUDA(cudaEventCreate(&e));
      uint32_t* done = nullptr;
      CHECK_CUDA(cudaHostAlloc(&done, sizeof *done, cudaHostAllocMapped));
      void* done_on_device = nullptr;
      CHECK_CUDA(cudaHostGetDevicePointer(&done_on_device, done, 0));
      const float one = 1.0f, zero = 0.0f;
      auto enqueue = [&](unsigned flags) {
        cudaEventRecordWithFlags(marks[0], stream, flags);
        if (copies) {
          cudaMemcpyAsync(dev, host_in, 2 * kMatrixBytes, cudaMemcpyHostToDevice, stream);
        }
        cudaEventRecordWithFlags(marks[1], stream, flags);
        cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, kSide, kSide, kSide, &one, dev, kSide,
                    dev + kSide * kSide, kSide, &zero, dev + 2 * kSide * kSide, kSide);
        cudaEventRecordWithFlags(marks[2], stream, flags);
        if (copies) {
          cudaMemcpyAsync(host_out, dev + 2 * kSide * kSide, kMatrixBytes, cudaMemcpyDeviceToHost,
                          stream);
        }
        cudaEventRecordWithFlags(marks[3], stream, flags);
        if (flag && write_value(stream, CUdeviceptr(done_on_device), 1,
                                CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
          refused.store(true);
        }
      };
      cudaGraphExec_t exec = nullptr;
      if (graph) {
        cudaGraph_t g = nullptr;
        CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        enqueue(cudaEventRecordExternal);
        if (cudaStreamEndCapture(stream, &g) != cudaSuccess ||
            cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
          cudaGetLastError();
          refused.store(true);
          exec = nullptr;
        }
        if (g != nullptr) cudaGraphDestroy(g);
      }
      auto request = [&] {
        if (refused.load(std::memory_order_relaxed)) return;
        __atomic_store_n(done, 0u, __ATOMIC_RELAXED);
        if (graph) {
          cudaGraphLaunch(exec, stream);
        } else {
          enqueue(0);
        }
        if (flag) {
          while (__atomic_load_n(done, __ATOMIC_ACQUIRE) == 0 &&
                 !refused.load(std::memory_order_relaxed)) {
            gpucompute::common::CpuRelax();
          }
        } else {
          cudaEventSynchronize(marks[3]);
        }
        float ms;
        for (int i = 0; i < 3; ++i) cudaEventElapsedTime(&ms, marks[i], marks[i + 1]);
      };
      for (int i = 0; i < 200; ++i) request();  // warm
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const auto until = Clock::now() + std::chrono::duration<double>(seconds);
      int64_t count = 0;
      for (; Clock::now() < until; ++count) request();
      total.fetch_add(count);
      CHECK_CUDA(cudaStreamSynchronize(stream));
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      for (cudaEvent_t& e : marks) cudaEventDestroy(e);
      cudaFreeHost(done);
      cublasDestroy(cublas);
      cudaFree(workspace);
      cudaFree(dev);
      cudaFreeHost(host_in);
      cudaFreeHost(host_out);
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : pool) t.join();
  return refused.load() ? -1 : double(total.load()) / seconds;
}

// RequestsPerSecond for 1 to 16 threads, with and without copies and graphs.
void ThreadsTable(const char* title, bool flag) {
  std::printf("%s", title);
  std::printf("%8s %16s %16s %16s %16s\n", "threads", "copies, calls", "copies, graph",
              "resident, calls", "resident, graph");
  for (int threads : {1, 2, 4, 8, 16}) {
    std::printf("%8d", threads);
    for (bool copies : {true, false}) {
      for (bool graph : {false, true}) {
        std::printf(" %15.1fk", RequestsPerSecond(threads, graph, copies, 0.5, flag) / 1000);
      }
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_iterations);
  CHECK_CUDA(cudaSetDevice(absl::GetFlag(FLAGS_device)));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, absl::GetFlag(FLAGS_device)));
  std::printf("gpucompute-host-costs: %s, %d timed repetitions per step (us)\n", prop.name, n);
  std::printf("%-58s %9s %9s\n", "step", "p50", "p90");

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t begin, end;
  CHECK_CUDA(cudaEventCreate(&begin));
  CHECK_CUDA(cudaEventCreate(&end));
  cublasHandle_t cublas;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) return 1;
  cublasSetStream(cublas, stream);
  cublasSetMathMode(cublas, CUBLAS_PEDANTIC_MATH);

  constexpr int kSide = 64;
  constexpr size_t kMatrixBytes = size_t(kSide) * kSide * sizeof(float);
  float *host_in, *host_out, *dev;
  CHECK_CUDA(cudaMallocHost(&host_in, 2 * kMatrixBytes));
  CHECK_CUDA(cudaMallocHost(&host_out, kMatrixBytes));
  CHECK_CUDA(cudaMalloc(&dev, 3 * kMatrixBytes));
  for (size_t i = 0; i < 2 * kSide * kSide; ++i) host_in[i] = float(i % 7) - 3.0f;
  cudaMemPool_t pool;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, absl::GetFlag(FLAGS_device)));
  const float one = 1.0f, zero = 0.0f;
  auto sgemm = [&] {
    cublasSgemm(cublas, CUBLAS_OP_N, CUBLAS_OP_N, kSide, kSide, kSide, &one, dev, kSide,
                dev + kSide * kSide, kSide, &zero, dev + 2 * kSide * kSide, kSide);
  };

  Row("cudaEventRecord", Time(n, [&](Clock::time_point&) { cudaEventRecord(end, stream); }));
  CHECK_CUDA(cudaEventRecord(begin, stream));
  CHECK_CUDA(cudaEventRecord(end, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  Row("cudaEventSynchronize, event already complete",
      Time(n, [&](Clock::time_point&) { cudaEventSynchronize(end); }));
  Row("cudaEventElapsedTime", Time(n, [&](Clock::time_point&) {
        float ms;
        cudaEventElapsedTime(&ms, begin, end);
      }));
  Row("cudaStreamSynchronize, idle stream",
      Time(n, [&](Clock::time_point&) { cudaStreamSynchronize(stream); }));
  Row("cudaMallocFromPoolAsync + cudaFreeAsync (16 KiB) + stream sync",
      Time(n, [&](Clock::time_point&) {
        void* p = nullptr;
        cudaMallocFromPoolAsync(&p, kMatrixBytes, pool, stream);
        cudaFreeAsync(p, stream);
        cudaStreamSynchronize(stream);
      }));
  cudaMemPool_t kept_pool;  // as the server's: freed memory stays in the pool
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = absl::GetFlag(FLAGS_device);
  CHECK_CUDA(cudaMemPoolCreate(&kept_pool, &props));
  uint64_t keep = UINT64_MAX;
  CHECK_CUDA(cudaMemPoolSetAttribute(kept_pool, cudaMemPoolAttrReleaseThreshold, &keep));
  Row("the same from a pool that keeps freed memory", Time(n, [&](Clock::time_point&) {
        void* p = nullptr;
        cudaMallocFromPoolAsync(&p, kMatrixBytes, kept_pool, stream);
        cudaFreeAsync(p, stream);
        cudaStreamSynchronize(stream);
      }));
  Row("cudaMemsetAsync 16 KiB + event record + event sync", Time(n, [&](Clock::time_point&) {
        cudaMemsetAsync(dev, 0, kMatrixBytes, stream);
        cudaEventRecord(end, stream);
        cudaEventSynchronize(end);
      }));
  CHECK_CUDA(cudaMemcpy(dev, host_in, 2 * kMatrixBytes, cudaMemcpyHostToDevice));
  Row("cublasSgemm 64^3 launch only", Time(n, [&](Clock::time_point&) { sgemm(); }));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  Row("cublasSgemm 64^3 + event record + event sync", Time(n, [&](Clock::time_point&) {
        sgemm();
        cudaEventRecord(end, stream);
        cudaEventSynchronize(end);
      }));
  // One small request as the server runs it: both inputs up in one copy,
  // the kernel, the result down, one host wait, three stage times.
  cudaEvent_t marks[4];
  for (cudaEvent_t& e : marks) CHECK_CUDA(cudaEventCreate(&e));
  Row("64^3 MatMul request: H2D 32 KiB, sgemm, D2H 16 KiB, 4 events",
      Time(n, [&](Clock::time_point&) {
        cudaEventRecord(marks[0], stream);
        cudaMemcpyAsync(dev, host_in, 2 * kMatrixBytes, cudaMemcpyHostToDevice, stream);
        cudaEventRecord(marks[1], stream);
        sgemm();
        cudaEventRecord(marks[2], stream);
        cudaMemcpyAsync(host_out, dev + 2 * kSide * kSide, kMatrixBytes, cudaMemcpyDeviceToHost,
                        stream);
        cudaEventRecord(marks[3], stream);
        cudaEventSynchronize(marks[3]);
        float ms;
        for (int i = 0; i < 3; ++i) cudaEventElapsedTime(&ms, marks[i], marks[i + 1]);
      }));
  Row("the same on resident operands (no copies)", Time(n, [&](Clock::time_point&) {
        cudaEventRecord(marks[0], stream);
        cudaEventRecord(marks[1], stream);
        sgemm();
        cudaEventRecord(marks[2], stream);
        cudaEventRecord(marks[3], stream);
        cudaEventSynchronize(marks[3]);
        float ms;
        for (int i = 0; i < 3; ++i) cudaEventElapsedTime(&ms, marks[i], marks[i + 1]);
      }));
  float check = 0;
  for (int i = 0; i < kSide * kSide; ++i) check += host_out[i];
  Row("getrandom, 16 bytes (a tensor id)", Time(n, [&](Clock::time_point&) {
        unsigned char id[16];
        if (getrandom(id, sizeof id, 0) != sizeof id) std::abort();
      }));
  using std::chrono::microseconds;
  Row("hand-off to a thread and back, both sleeping (futex)",
      HandOff(n, /*poll=*/false, microseconds(0)));
  Row("the same, the other thread asleep 300 us before",
      HandOff(n, /*poll=*/false, microseconds(300)));
  Row("the same, the other thread asleep 3 ms before",
      HandOff(n / 4, /*poll=*/false, microseconds(3000)));
  Row("hand-off to a thread and back, both polling", HandOff(n, /*poll=*/true, microseconds(0)));
  std::printf("(checksum of the last 64^3 result: %.1f)\n", check);

  ThreadsTable("\n64^3 MatMul requests per second, threads at once, each its own stream\n",
               /*flag=*/false);
  ThreadsTable("\nThe same, the host polling a flag the stream writes (-0.0k: refused)\n",
               /*flag=*/true);

  for (cudaEvent_t& e : marks) cudaEventDestroy(e);
  cudaMemPoolDestroy(kept_pool);
  cublasDestroy(cublas);
  cudaFree(dev);
  cudaFreeHost(host_in);
  cudaFreeHost(host_out);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
  return 0;
}
