#include "server/cpu/cpu_device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gpucompute/common/time.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/cpu_multiply_add.h"
#include "gpucompute/kernels/reference.h"
#include "server/cpu/random_inputs.h"

namespace gpucompute::server {
namespace {

using Clock = std::chrono::steady_clock;

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : 0;
}

// The ceilings are measured the way the kernels run: on every core (the CPU
// kernels split their work over all of them), over buffers well beyond the
// caches, the best of several runs (a busy moment only makes a run slower),
// and in the roofline's convention of bytes: read + written for a copy,
// read for a read-only stream.
constexpr int kCeilingRuns = 5;

int CeilingThreads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

// The largest cache the system reports (0: none reported).
int64_t LastLevelCacheBytes() {
  long bytes = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
  bytes = std::max(bytes, sysconf(_SC_LEVEL3_CACHE_SIZE));
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  bytes = std::max(bytes, sysconf(_SC_LEVEL2_CACHE_SIZE));
#endif
  return std::max<long>(bytes, 0);
}

// Bytes of each of the two ceiling buffers: the last-level cache, at least
// 128 MiB, at most 256 MiB (start-up time) and a sixteenth of the memory. Both
// runs stream through both buffers: twice the cache, or more.
size_t CeilingBufferBytes() {
  size_t bytes = std::max(size_t{128} << 20, size_t(LastLevelCacheBytes()));
  bytes = std::min(bytes, size_t{256} << 20);
  if (const int64_t memory = PhysicalMemoryBytes(); memory > 0) {
    bytes = std::min(bytes, std::max(size_t{16} << 20, size_t(memory / 16)));
  }
  return bytes & ~size_t{4095};
}

// Runs body(thread, begin, end) once over [0, bytes) split in page-aligned
// slices, one per thread (the first on this one).
template <typename Body>
void RunInSlices(size_t bytes, int threads, const Body& body) {
  const size_t slice = ((bytes / threads) + 4095) & ~size_t{4095};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    const size_t begin = std::min(bytes, t * slice), end = std::min(bytes, begin + slice);
    pool.emplace_back(body, t, begin, end);
  }
  body(0, 0, std::min(bytes, slice));
  for (auto& th : pool) th.join();
}

// RunInSlices kCeilingRuns times; the fastest run in microseconds.
template <typename Body>
double BestParallelRunUs(size_t bytes, int threads, const Body& body) {
  double best_us = 1e30;
  for (int run = 0; run < kCeilingRuns; ++run) {
    const auto start = Clock::now();
    RunInSlices(bytes, threads, body);
    best_us = std::min(best_us, common::MicrosSince(start));
  }
  return best_us;
}

struct BandwidthCeilings {
  double copy_gbps = 0;  // bytes read + written per second
  double read_gbps = 0;  // bytes read per second
};

BandwidthCeilings MeasureBandwidth() {
  const size_t bytes = CeilingBufferBytes();
  const int threads = CeilingThreads();
  // Filled, so every page is mapped before the first timed run.
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  BandwidthCeilings c;
  const double copy_us = BestParallelRunUs(bytes, threads, [&](int, size_t begin, size_t end) {
    std::memcpy(dst.data() + begin, src.data() + begin, end - begin);
  });
  c.copy_gbps = 2.0 * double(bytes) / copy_us / 1e3;
  // A sum of 64-bit words in four independent lanes: the compiler vectorizes
  // it, so the loop waits on memory, not on additions.
  std::vector<uint64_t> sums(threads);
  const double read_us = BestParallelRunUs(bytes, threads, [&](int t, size_t begin, size_t end) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (const char* buffer : {src.data(), dst.data()}) {
      const uint64_t* p = reinterpret_cast<const uint64_t*>(buffer + begin);
      const size_t words = (end - begin) / sizeof(uint64_t);
      size_t i = 0;
      for (; i + 4 <= words; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      for (; i < words; ++i) s0 += p[i];
    }
    sums[t] = s0 + s1 + s2 + s3;
  });
  c.read_gbps = 2.0 * double(bytes) / read_us / 1e3;
  // Publishing the results keeps the compiler from dropping the loops.
  static volatile uint64_t published = 0;
  for (uint64_t v : sums) published = published + v;
  published = published + uint64_t(dst[bytes / 2]);
  return c;
}

// Multiply-add rate on every core, the best of several runs: chains of
// float64 multiply-adds in registers, with the instructions the MatMul
// tiles use on this core (cpu_multiply_add.h), so that the roofline's
// ceiling and the kernel it judges are the same arithmetic.
double MeasureMultiplyAddGFlops() {
  const int threads = CeilingThreads();
  constexpr int64_t kIterations = 2'000'000;
  std::vector<double> sink(threads);
  double best_us = 1e30;
  for (int run = 0; run < kCeilingRuns; ++run) {
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([t, &sink] { sink[t] = kernels::CpuMultiplyAddChains(kIterations); });
    }
    for (auto& th : pool) th.join();
    best_us = std::min(best_us, common::MicrosSince(start));
  }
  // Publishing the results keeps the compiler from dropping the loops.
  static volatile double published = 0;
  for (double v : sink) published = published + v;
  return double(kernels::CpuMultiplyAddChainFlops()) * double(kIterations) * threads / best_us /
         1e3;
}

// Bytes written to evict a last-level cache of `cache_bytes` (0: unknown):
// twice its size, at least 64 MiB.
size_t FlushBytes(int64_t cache_bytes) {
  return std::max<size_t>(size_t{64} << 20, 2 * size_t(std::max<int64_t>(cache_bytes, 0)));
}

// Evicts the caches between Profile's timed runs: every core writes its
// slice of a buffer larger than the last-level cache, so the shared cache
// and each core's own hold flush data, not the variant's operands.
class CacheFlush {
 public:
  explicit CacheFlush(size_t bytes) : buffer_(bytes) {}
  void Run() {
    if (buffer_.empty()) return;
    ++round_;
    RunInSlices(buffer_.size(), CeilingThreads(), [this](int, size_t begin, size_t end) {
      std::memset(buffer_.data() + begin, round_, end - begin);
    });
  }

 private:
  std::vector<char> buffer_;
  unsigned char round_ = 0;  // a new value each time: the writes cannot be skipped
};

// The pieces as one block: in place when there is one, else copied into `copy`.
const void* Contiguous(const HostPieces& pieces, std::string& copy) {
  if (pieces.empty()) return nullptr;
  if (pieces.size() == 1) return pieces.front().data();
  size_t total = 0;
  for (const auto& p : pieces) total += p.size();
  copy.reserve(total);
  for (const auto& p : pieces) copy.append(p.data(), p.size());
  return copy.data();
}

// A tensor's bytes in host memory. Pages are touched only when written: a
// large tensor costs nothing until its upload fills it.
class HostResidentMemory final : public ResidentMemory {
 public:
  HostResidentMemory(char* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  ~HostResidentMemory() override { std::free(data_); }
  void* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }

 private:
  char* const data_;
  const int64_t bytes_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice(int workers, const Ceilings& given)
      : workers_(workers > 0 ? workers : int(std::max(1u, std::thread::hardware_concurrency()))) {
    description_.name = std::string(kCpuDeviceName);
    description_.memory_bytes = PhysicalMemoryBytes();
    description_.multiprocessors = int32_t(std::max(1u, std::thread::hardware_concurrency()));
    description_.backend = kernels::Backend::kCpu;
    ceilings_ = given;
    if (given.gbytes_per_s <= 0 || given.gbytes_per_s_read <= 0) {
      const BandwidthCeilings bandwidth = MeasureBandwidth();
      if (given.gbytes_per_s <= 0) ceilings_.gbytes_per_s = bandwidth.copy_gbps;
      if (given.gbytes_per_s_read <= 0) ceilings_.gbytes_per_s_read = bandwidth.read_gbps;
    }
    if (given.gflops <= 0) ceilings_.gflops = MeasureMultiplyAddGFlops();
    ceilings_.cache_bytes = LastLevelCacheBytes();
  }

  const DeviceDescription& description() const override { return description_; }
  const Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return workers_; }

  absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested&) override {
    std::string a_copy, b_copy;
    // A tensor operand is read in place; a kept result is written in place.
    const void* a = job.a_resident ? job.a_resident->data() : Contiguous(job.a, a_copy);
    const void* b = job.b_resident ? job.b_resident->data() : Contiguous(job.b, b_copy);
    void* out = job.out_resident ? job.out_resident->data() : job.out;
    kernels::Buffers buffers{a, b, out, nullptr, 0};
    const auto start = Clock::now();
    if (auto s = job.variant->launch(job.problem, buffers, {}); !s.ok()) return s;
    StageTimes times;
    times.compute_us = int64_t(common::MicrosSince(start));
    return times;
  }

  absl::Status SetCeilings(const Ceilings& ceilings) override {
    ceilings_ = ceilings;
    return absl::OkStatus();
  }

  // Host memory is the CPU's device memory: tensors share the machine's RAM.
  int64_t memory_budget_bytes() const override { return description_.memory_bytes; }

  absl::StatusOr<std::unique_ptr<ResidentMemory>> AllocateResident(int64_t bytes,
                                                                   absl::Time) override {
    void* data = std::malloc(size_t(std::max<int64_t>(bytes, 1)));
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host memory for a tensor"));
    }
    return std::make_unique<HostResidentMemory>(static_cast<char*>(data), bytes);
  }

  absl::Status WriteResident(ResidentMemory& dst, int64_t offset, const HostPieces& src,
                             bool /*src_pinned*/) override {
    char* at = static_cast<char*>(dst.data()) + offset;
    for (const auto& piece : src) {
      std::memcpy(at, piece.data(), piece.size());
      at += piece.size();
    }
    return absl::OkStatus();
  }

  absl::Status ReadResident(const ResidentMemory& src, int64_t offset, int64_t bytes, void* dst,
                            bool /*dst_pinned*/) override {
    std::memcpy(dst, static_cast<const char*>(src.data()) + offset, size_t(bytes));
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                          const StopRequested& stop) override {
    const kernels::Problem& p = job.problem;
    std::vector<char> a, b;
    FillRandomInputs(p, job.seed, a, b);
    const std::vector<double> reference = kernels::ReferenceResult(p, a.data(), b.data());
    std::vector<char> out(kernels::OutputBytes(p));
    const kernels::Buffers buffers{a.data(), b.empty() ? nullptr : b.data(), out.data(), nullptr,
                                   0};

    CacheFlush flush(job.flush_cache ? FlushBytes(ceilings_.cache_bytes) : 0);
    std::vector<VariantMeasurement> results;
    for (const kernels::Variant* v : job.variants) {
      if (stop()) return absl::CancelledError("profile abandoned: the client went away");
      VariantMeasurement m;
      m.variant = v;
      PoisonWithNaN(kernels::OutputDType(p), out.data(), kernels::OutputElements(p));
      if (auto s = v->launch(p, buffers, {}); !s.ok()) {
        m.error = std::string(s.message());
        results.push_back(std::move(m));
        continue;
      }
      const kernels::CheckResult check =
          kernels::CheckAgainstReference(p, v->reduced_precision, a.data(), out.data(), reference);
      m.max_rel_error = check.max_rel_error;
      m.ok = check.ok;
      m.error = check.message;
      for (int i = 0; m.ok && i < job.warmup; ++i) (void)v->launch(p, buffers, {});
      for (int i = 0; m.ok && i < job.repetitions && !stop(); ++i) {
        if (job.flush_cache) flush.Run();
        const auto start = Clock::now();
        (void)v->launch(p, buffers, {});
        m.times_us.push_back(common::MicrosSince(start));
      }
      results.push_back(std::move(m));
    }
    return results;
  }

 private:
  const int workers_;
  DeviceDescription description_;
  Ceilings ceilings_;
};

}  // namespace

std::unique_ptr<Device> MakeCpuDevice(int workers, const Ceilings& given) {
  return std::make_unique<CpuDevice>(workers, given);
}

}  // namespace gpucompute::server
