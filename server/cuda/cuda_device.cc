#include "server/cuda/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/cuda_status.h"
#include "server/cuda/device_memory.h"
#include "server/cuda/fill.h"
#include "server/cuda/host_copy.h"
#include "server/cuda/staging.h"

namespace gpucompute::server::cuda {

using kernels::cuda::CublasStatus;
using kernels::cuda::CudaStatus;
namespace {

using Clock = std::chrono::steady_clock;

int64_t MicrosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
}

size_t Aligned(int64_t bytes) { return (size_t(bytes) + 255) & ~size_t(255); }

// Device memory each slot keeps for small requests, whose operands, result
// and workspace all fit: they skip the pool and wait on the host only once.
constexpr int64_t kSmallScratchBytes = int64_t{1} << 20;

// Matmuls above this many multiply-adds get their float64 reference from
// cuBLAS DGEMM on the device instead of host loops.
constexpr double kHostReferenceMaxMacs = 1 << 27;

// Resources for one request in flight on this device.
struct Slot {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  // Stage boundaries on the stream: upload_begin -> start is the upload,
  // start -> stop the kernel.
  cudaEvent_t upload_begin = nullptr, start = nullptr, stop = nullptr;
  cudaEvent_t downloaded = nullptr;  // small requests: the result is in staging
  void* scratch = nullptr;           // kSmallScratchBytes
  std::unique_ptr<StagingBuffers> staging;
};

// Device allocations of one request, returned to the pool on scope exit.
class Allocations {
 public:
  Allocations(DeviceMemory& memory, cudaStream_t stream) : memory_(memory), stream_(stream) {}
  ~Allocations() {
    for (void* p : ptrs_) memory_.Free(p, stream_);
    cudaStreamSynchronize(stream_);  // memory is back in the pool before the budget is released
  }
  absl::StatusOr<void*> Get(int64_t bytes) {
    auto p = memory_.Allocate(size_t(bytes), stream_);
    if (p.ok()) ptrs_.push_back(*p);
    return p;
  }

 private:
  DeviceMemory& memory_;
  cudaStream_t stream_;
  std::vector<void*> ptrs_;
};

double MedianOf(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, int slots) : ordinal_(ordinal), copier_(6), slot_count_(slots) {}

  ~CudaDevice() override {
    cudaSetDevice(ordinal_);
    for (auto& s : slots_) {
      cublasDestroy(s->cublas);
      cudaEventDestroy(s->upload_begin);
      cudaEventDestroy(s->downloaded);
      cudaFree(s->scratch);
      cudaEventDestroy(s->start);
      cudaEventDestroy(s->stop);
      cudaStreamDestroy(s->stream);
    }
  }

  absl::Status Init(const CudaDeviceOptions& options) {
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaSetDevice(ordinal_), "cudaSetDevice");
    cudaDeviceProp prop;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, ordinal_), "cudaGetDeviceProperties");
    description_.name = absl::StrCat("cuda:", ordinal_, " ", prop.name);
    description_.memory_bytes = int64_t(prop.totalGlobalMem);
    description_.multiprocessors = prop.multiProcessorCount;
    description_.backend = kernels::Backend::kCuda;

    size_t free_bytes = 0, total_bytes = 0;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const int64_t cap = std::min<int64_t>(int64_t(options.device_memory_fraction * double(total_bytes)),
                                          int64_t(free_bytes) - (int64_t{512} << 20));
    if (cap <= 0) {
      return absl::ResourceExhaustedError(absl::StrCat(description_.name, ": only ", free_bytes,
                                                       " bytes free, too little to serve"));
    }
    auto memory = DeviceMemory::Create(ordinal_, cap);
    if (!memory.ok()) return memory.status();
    memory_ = std::move(*memory);

    for (int i = 0; i < slot_count_; ++i) {
      auto slot = std::make_unique<Slot>();
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&slot->stream, cudaStreamNonBlocking),
                                      "cudaStreamCreate");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&slot->upload_begin), "cudaEventCreate");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&slot->downloaded), "cudaEventCreate");
      device_malloc_calls_ += 1;
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMalloc(&slot->scratch, kSmallScratchBytes), "cudaMalloc(scratch)");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&slot->start), "cudaEventCreate");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventCreate(&slot->stop), "cudaEventCreate");
      if (auto s = CublasStatus(cublasCreate(&slot->cublas), "cublasCreate"); !s.ok()) return s;
      auto staging = StagingBuffers::Create(host_alloc_calls_);
      if (!staging.ok()) return staging.status();
      slot->staging = std::move(*staging);
      free_slots_.push_back(slot.get());
      slots_.push_back(std::move(slot));
    }
    return MeasureCeilings();
  }

  const DeviceDescription& description() const override { return description_; }
  const Ceilings& ceilings() const override { return ceilings_; }
  int concurrency() const override { return slot_count_; }
  bool healthy() const override { return healthy_.load(std::memory_order_relaxed); }

  DeviceCounters counters() const override {
    DeviceCounters c;
    c.healthy = healthy_.load();
    c.pool_reserved_bytes = memory_->reserved_bytes();
    c.pool_used_bytes = memory_->used_bytes();
    c.pool_growths = memory_->growths();
    c.device_malloc_calls = device_malloc_calls_.load();
    c.host_alloc_calls = host_alloc_calls_.load();
    return c;
  }

  absl::StatusOr<StageTimes> Execute(const ComputeJob& job, const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) return Unhealthy("cudaSetDevice failed");
    Slot* slot = AcquireSlot();
    absl::Cleanup release = [&] { ReleaseSlot(slot); };
    const kernels::Problem& p = job.problem;
    const int64_t es = kernels::ElementSize(p.dtype);
    const int64_t a_bytes = kernels::InputAElements(p) * es, b_bytes = kernels::InputBElements(p) * es;
    const int64_t out_bytes = kernels::OutputElements(p) * es;
    const int64_t ws_bytes = int64_t(job.variant->WorkspaceBytes(p));
    const int64_t total = Aligned(a_bytes) + Aligned(b_bytes) + Aligned(out_bytes) + Aligned(ws_bytes);
    if (total <= kSmallScratchBytes) {
      auto times = ExecuteSmall(job, stop, *slot, a_bytes, b_bytes, out_bytes, ws_bytes);
      if (!times.ok()) return AfterError(times.status());
      return times;
    }

    if (auto s = memory_->Reserve(total, absl::Now() + kMaxMemoryWait); !s.ok()) return s;
    absl::Cleanup unreserve = [&] { memory_->Unreserve(total); };
    if (stop()) return absl::CancelledError("request abandoned while waiting for device memory");

    StageTimes times;
    absl::Status status = [&]() -> absl::Status {
      Allocations alloc(*memory_, slot->stream);
      auto a = alloc.Get(a_bytes);
      auto b = b_bytes ? alloc.Get(b_bytes) : absl::StatusOr<void*>(nullptr);
      auto out = alloc.Get(out_bytes);
      auto ws = ws_bytes ? alloc.Get(ws_bytes) : absl::StatusOr<void*>(nullptr);
      for (const auto* r : {&a, &b, &out, &ws}) {
        if (!r->ok()) return r->status();
      }
      // The stream is idle here, so upload_begin fires as the first copy is
      // queued and the upload stage counts host gathering and DMA alike.
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot->upload_begin, slot->stream), "cudaEventRecord");
      if (auto s = slot->staging->Upload(*a, job.a, slot->stream, copier_); !s.ok()) return s;
      if (b_bytes) {
        if (auto s = slot->staging->Upload(*b, job.b, slot->stream, copier_); !s.ok()) return s;
      }
      if (stop()) return absl::CancelledError("request abandoned before its kernel ran");

      // The kernel follows the upload in stream order: no host wait between.
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot->start, slot->stream), "cudaEventRecord");
      const kernels::Buffers buffers{*a, *b, *out, *ws, size_t(ws_bytes)};
      if (auto s = job.variant->launch(p, buffers, LaunchContextOf(*slot)); !s.ok()) return s;
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot->stop, slot->stream), "cudaEventRecord");
      // Waiting here keeps the kernel's time out of the download stage.
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot->stop), "kernel wait");

      const auto download_start = Clock::now();
      if (auto s = slot->staging->Download(job.out, *out, out_bytes, slot->stream, copier_); !s.ok()) {
        return s;
      }
      times.download_us = MicrosSince(download_start);
      float upload_ms = 0, compute_ms = 0;
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&upload_ms, slot->upload_begin, slot->start),
                                      "cudaEventElapsedTime");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&compute_ms, slot->start, slot->stop),
                                      "cudaEventElapsedTime");
      times.upload_us = int64_t(upload_ms * 1000.0f);
      times.compute_us = int64_t(compute_ms * 1000.0f);
      return absl::OkStatus();
    }();
    if (!status.ok()) return AfterError(status);
    return times;
  }

  absl::StatusOr<std::vector<VariantMeasurement>> Measure(const ProfileJob& job,
                                                          const StopRequested& stop) override {
    if (cudaSetDevice(ordinal_) != cudaSuccess) return Unhealthy("cudaSetDevice failed");
    Slot* slot = AcquireSlot();
    absl::Cleanup release = [&] { ReleaseSlot(slot); };
    const kernels::Problem& p = job.problem;
    const int64_t es = kernels::ElementSize(p.dtype);
    const int64_t na = kernels::InputAElements(p), nb = kernels::InputBElements(p);
    const int64_t nout = kernels::OutputElements(p);
    int64_t ws_bytes = 0;
    for (const kernels::Variant* v : job.variants) ws_bytes = std::max<int64_t>(ws_bytes, v->WorkspaceBytes(p));
    const bool device_reference =
        p.op == kernels::Op::kMatMul && double(p.m) * double(p.n) * double(p.k) > kHostReferenceMaxMacs;
    const int64_t ref_bytes = device_reference ? Aligned(8 * na) + Aligned(8 * nb) + Aligned(8 * nout) : 0;
    const int64_t total = Aligned(na * es) + Aligned(nb * es) + Aligned(nout * es) + Aligned(ws_bytes) + ref_bytes;
    if (auto s = memory_->Reserve(total, absl::Now() + kMaxMemoryWait); !s.ok()) return s;
    absl::Cleanup unreserve = [&] { memory_->Unreserve(total); };

    std::vector<VariantMeasurement> results;
    absl::Status status = [&]() -> absl::Status {
      Allocations alloc(*memory_, slot->stream);
      auto a = alloc.Get(na * es);
      auto b = nb ? alloc.Get(nb * es) : absl::StatusOr<void*>(nullptr);
      auto out = alloc.Get(nout * es);
      auto ws = ws_bytes ? alloc.Get(ws_bytes) : absl::StatusOr<void*>(nullptr);
      for (const auto* r : {&a, &b, &out, &ws}) {
        if (!r->ok()) return r->status();
      }
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(Fill(p.dtype, *a, na, job.seed, slot->stream), "fill a");
      if (nb) GPUCOMPUTE_RETURN_IF_CUDA_ERROR(Fill(p.dtype, *b, nb, job.seed + 1, slot->stream), "fill b");

      // Inputs on the host for the check's scale and for host references.
      std::vector<char> host_a(na * es), host_b(nb * es), host_out(nout * es);
      if (auto s = slot->staging->Download(host_a.data(), *a, na * es, slot->stream, copier_); !s.ok()) return s;
      if (nb) {
        if (auto s = slot->staging->Download(host_b.data(), *b, nb * es, slot->stream, copier_); !s.ok()) return s;
      }
      std::vector<double> reference;
      if (device_reference) {
        auto ref = DeviceMatMulReference(p, *a, *b, alloc, *slot);
        if (!ref.ok()) return ref.status();
        reference = std::move(*ref);
      } else {
        reference = kernels::ReferenceResult(p, host_a.data(), host_b.data());
      }

      const kernels::Buffers buffers{*a, *b, *out, *ws, size_t(ws_bytes)};
      const kernels::LaunchContext ctx = LaunchContextOf(*slot);
      for (const kernels::Variant* v : job.variants) {
        if (stop()) return absl::CancelledError("profile abandoned: the client went away");
        VariantMeasurement m;
        m.variant = v;
        // All-ones bytes are NaN in both float32 and float64.
        GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(*out, 0xff, nout * es, slot->stream), "poison");
        absl::Status launched = v->launch(p, buffers, ctx);
        if (launched.ok()) {
          launched = slot->staging->Download(host_out.data(), *out, nout * es, slot->stream, copier_);
        }
        if (!launched.ok()) {
          if (auto fatal = AfterError(launched); !healthy_.load()) return fatal;
          m.error = std::string(launched.message());
          results.push_back(std::move(m));
          continue;
        }
        const kernels::CheckResult check =
            kernels::CheckAgainstReference(p, v->reduced_precision, host_a.data(), host_out.data(), reference);
        m.ok = check.ok;
        m.error = check.message;
        m.max_rel_error = check.max_rel_error;
        if (m.ok) {
          if (auto s = TimeVariant(*v, p, buffers, *slot, job.warmup, job.repetitions, stop, m.times_us);
              !s.ok()) {
            return AfterError(s);
          }
        }
        results.push_back(std::move(m));
      }
      return absl::OkStatus();
    }();
    if (!status.ok()) return AfterError(status);
    return results;
  }

 private:
  static constexpr absl::Duration kMaxMemoryWait = absl::Seconds(30);

  // A request that fits in the slot's scratch: the inputs go up in one copy
  // from one staging chunk, the result comes down into the other, and the
  // host waits once, after the download. Stage times come from events.
  absl::StatusOr<StageTimes> ExecuteSmall(const ComputeJob& job, const StopRequested& stop, Slot& slot,
                                          int64_t a_bytes, int64_t b_bytes, int64_t out_bytes,
                                          int64_t ws_bytes) {
    StagingBuffers& staging = *slot.staging;
    if (auto s = staging.WaitIdle(); !s.ok()) return s;
    char* up = staging.chunk(0);
    char* down = staging.chunk(1);
    char* dev = static_cast<char*>(slot.scratch);
    const size_t b_at = Aligned(a_bytes), out_at = b_at + Aligned(b_bytes);
    const size_t ws_at = out_at + Aligned(out_bytes);
    copier_.Gather(up, job.a);  // under 1 MiB: on this thread
    copier_.Gather(up + b_at, job.b);
    const size_t up_bytes = b_bytes ? b_at + size_t(b_bytes) : size_t(a_bytes);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.upload_begin, slot.stream), "cudaEventRecord");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(dev, up, up_bytes, cudaMemcpyHostToDevice, slot.stream), "upload cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.start, slot.stream), "cudaEventRecord");
    if (stop()) {
      // The staging chunk must not be refilled while the copy reads it.
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(slot.stream), "upload wait");
      return absl::CancelledError("request abandoned before its kernel ran");
    }
    const kernels::Buffers buffers{dev, b_bytes ? dev + b_at : nullptr, dev + out_at,
                                   ws_bytes ? dev + ws_at : nullptr, size_t(ws_bytes)};
    if (auto s = job.variant->launch(job.problem, buffers, LaunchContextOf(slot)); !s.ok()) {
      cudaStreamSynchronize(slot.stream);
      return s;
    }
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.stop, slot.stream), "cudaEventRecord");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(
        cudaMemcpyAsync(down, dev + out_at, size_t(out_bytes), cudaMemcpyDeviceToHost, slot.stream),
        "download cudaMemcpyAsync");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.downloaded, slot.stream), "cudaEventRecord");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.downloaded), "download wait");
    std::memcpy(job.out, down, size_t(out_bytes));

    float upload_ms = 0, compute_ms = 0, download_ms = 0;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&upload_ms, slot.upload_begin, slot.start), "cudaEventElapsedTime");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&compute_ms, slot.start, slot.stop), "cudaEventElapsedTime");
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&download_ms, slot.stop, slot.downloaded), "cudaEventElapsedTime");
    StageTimes times;
    times.upload_us = int64_t(upload_ms * 1000.0f);
    times.compute_us = int64_t(compute_ms * 1000.0f);
    times.download_us = int64_t(download_ms * 1000.0f);
    return times;
  }

  kernels::LaunchContext LaunchContextOf(const Slot& slot) const {
    return kernels::LaunchContext{slot.stream, slot.cublas};
  }

  Slot* AcquireSlot() {
    absl::MutexLock lock(&slots_mu_);
    slots_mu_.Await(absl::Condition(
        +[](std::vector<Slot*>* free) { return !free->empty(); }, &free_slots_));
    Slot* s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }

  void ReleaseSlot(Slot* slot) {
    absl::MutexLock lock(&slots_mu_);
    free_slots_.push_back(slot);
  }

  absl::Status Unhealthy(const std::string& why) {
    healthy_.store(false);
    return absl::InternalError(absl::StrCat(description_.name, " taken out of service: ", why));
  }

  // A CUDA error fails this request only, unless the context is broken
  // (sticky errors such as an illegal address): then the device leaves service.
  absl::Status AfterError(const absl::Status& status) {
    if (status.code() != absl::StatusCode::kInternal) return status;
    cudaGetLastError();  // clears non-sticky errors
    const cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess) {
      healthy_.store(false);
      return absl::InternalError(absl::StrCat(status.message(), "; ", description_.name,
                                              " taken out of service: ", cudaGetErrorString(sticky)));
    }
    return status;
  }

  static cudaError_t Fill(kernels::DType dtype, void* data, int64_t count, uint64_t seed, cudaStream_t s) {
    return dtype == kernels::DType::kFloat32 ? FillUniform(static_cast<float*>(data), count, seed, s)
                                             : FillUniform(static_cast<double*>(data), count, seed, s);
  }

  // C = A * B in float64 with cuBLAS (row-major via the transposed product).
  absl::StatusOr<std::vector<double>> DeviceMatMulReference(const kernels::Problem& p, void* a, void* b,
                                                            Allocations& alloc, Slot& slot) {
    const int64_t na = p.m * p.k, nb = p.k * p.n, nc = p.m * p.n;
    double *a64 = static_cast<double*>(a), *b64 = static_cast<double*>(b);
    if (p.dtype == kernels::DType::kFloat32) {
      auto wa = alloc.Get(8 * na);
      auto wb = alloc.Get(8 * nb);
      if (!wa.ok()) return wa.status();
      if (!wb.ok()) return wb.status();
      a64 = static_cast<double*>(*wa);
      b64 = static_cast<double*>(*wb);
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(WidenToDouble(static_cast<float*>(a), a64, na, slot.stream), "widen a");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(WidenToDouble(static_cast<float*>(b), b64, nb, slot.stream), "widen b");
    }
    auto c = alloc.Get(8 * nc);
    if (!c.ok()) return c.status();
    const double one = 1, zero = 0;
    if (auto s = CublasStatus(cublasSetStream(slot.cublas, slot.stream), "cublasSetStream"); !s.ok()) return s;
    if (auto s = CublasStatus(cublasSetMathMode(slot.cublas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"); !s.ok()) return s;
    if (auto s = CublasStatus(cublasDgemm(slot.cublas, CUBLAS_OP_N, CUBLAS_OP_N, int(p.n), int(p.m), int(p.k),
                                          &one, b64, int(p.n), a64, int(p.k), &zero,
                                          static_cast<double*>(*c), int(p.n)),
                              "cublasDgemm(reference)");
        !s.ok()) {
      return s;
    }
    std::vector<double> ref(nc);
    if (auto s = slot.staging->Download(ref.data(), *c, 8 * nc, slot.stream, copier_); !s.ok()) return s;
    return ref;
  }

  absl::Status TimeVariant(const kernels::Variant& v, const kernels::Problem& p, const kernels::Buffers& buffers,
                           Slot& slot, int warmup, int repetitions, const StopRequested& stop,
                           std::vector<double>& times_us) {
    const kernels::LaunchContext ctx = LaunchContextOf(slot);
    for (int i = 0; i < warmup; ++i) {
      if (auto s = v.launch(p, buffers, ctx); !s.ok()) return s;
    }
    for (int i = 0; i < repetitions && !stop(); ++i) {
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.start, slot.stream), "cudaEventRecord");
      if (auto s = v.launch(p, buffers, ctx); !s.ok()) return s;
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.stop, slot.stream), "cudaEventRecord");
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.stop), "cudaEventSynchronize");
      float ms = 0;
      GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, slot.start, slot.stop), "cudaEventElapsedTime");
      times_us.push_back(double(ms) * 1000.0);
    }
    return absl::OkStatus();
  }

  // Device-to-device copy bandwidth and cuBLAS FP32 (no TF32) / FP64 rates.
  absl::Status MeasureCeilings() {
    Slot& slot = *slots_.front();
    const size_t copy_bytes = size_t{512} << 20;
    void *src = nullptr, *dst = nullptr;
    device_malloc_calls_ += 2;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMalloc(&src, copy_bytes), "cudaMalloc(ceilings)");
    absl::Cleanup free_src = [&] { cudaFree(src); };
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaMalloc(&dst, copy_bytes), "cudaMalloc(ceilings)");
    absl::Cleanup free_dst = [&] { cudaFree(dst); };
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(FillUniform(static_cast<float*>(src), copy_bytes / 4, 7, slot.stream), "fill");
    auto timed = [&](auto&& body) -> absl::StatusOr<double> {
      std::vector<float> ms;
      for (int i = 0; i < 8; ++i) {
        GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.start, slot.stream), "cudaEventRecord");
        if (auto s = body(); !s.ok()) return s;
        GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventRecord(slot.stop, slot.stream), "cudaEventRecord");
        GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaEventSynchronize(slot.stop), "cudaEventSynchronize");
        float t = 0;
        cudaEventElapsedTime(&t, slot.start, slot.stop);
        if (i >= 2) ms.push_back(t);  // the first two are warm-up
      }
      return MedianOf(ms) * 1e-3;
    };
    auto copy_s = timed([&]() -> absl::Status {
      return CudaStatus(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, slot.stream), "copy");
    });
    if (!copy_s.ok()) return copy_s.status();
    ceilings_.gbytes_per_s = 2.0 * double(copy_bytes) / *copy_s / 1e9;

    // 4096^3 GEMMs on random data in the copy buffers (2 x 64 MiB + 64 MiB).
    constexpr int n = 4096;
    if (auto s = CublasStatus(cublasSetStream(slot.cublas, slot.stream), "cublasSetStream"); !s.ok()) return s;
    float* fa = static_cast<float*>(src);
    float* fc = static_cast<float*>(dst);
    const float f1 = 1, f0 = 0;
    // SGEMM GFLOP/s in `mode`: pedantic FP32, then TF32 tensor cores.
    auto sgemm_gflops = [&](cublasMath_t mode, const char* what) -> absl::StatusOr<double> {
      if (auto s = CublasStatus(cublasSetMathMode(slot.cublas, mode), "cublasSetMathMode"); !s.ok()) return s;
      auto seconds = timed([&] {
        return CublasStatus(cublasSgemm(slot.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &f1, fa, n,
                                        fa + size_t(n) * n, n, &f0, fc, n), what);
      });
      if (!seconds.ok()) return seconds.status();
      return 2.0 * n * double(n) * n / *seconds / 1e9;
    };
    auto fp32 = sgemm_gflops(CUBLAS_PEDANTIC_MATH, "cublasSgemm");
    if (!fp32.ok()) return fp32.status();
    ceilings_.gflops = *fp32;
    auto tf32 = sgemm_gflops(CUBLAS_TF32_TENSOR_OP_MATH, "cublasSgemm(TF32)");
    if (!tf32.ok()) return tf32.status();
    ceilings_.gflops_tf32 = *tf32;
    if (auto s = CublasStatus(cublasSetMathMode(slot.cublas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"); !s.ok()) return s;
    double* da = static_cast<double*>(src);
    double* dc = static_cast<double*>(dst);
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(FillUniform(da, 2 * size_t(n) * n, 11, slot.stream), "fill");
    const double d1 = 1, d0 = 0;
    auto dgemm = timed([&] {
      return CublasStatus(cublasDgemm(slot.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &d1, da, n,
                                      da + size_t(n) * n, n, &d0, dc, n), "cublasDgemm");
    });
    if (!dgemm.ok()) return dgemm.status();
    ceilings_.gflops_fp64 = 2.0 * n * double(n) * n / *dgemm / 1e9;
    GPUCOMPUTE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(slot.stream), "cudaStreamSynchronize");
    return absl::OkStatus();
  }

  const int ordinal_;
  HostCopyPool copier_;
  const int slot_count_;
  DeviceDescription description_;
  Ceilings ceilings_;
  std::unique_ptr<DeviceMemory> memory_;
  std::vector<std::unique_ptr<Slot>> slots_;
  absl::Mutex slots_mu_;
  std::vector<Slot*> free_slots_ ABSL_GUARDED_BY(slots_mu_);
  std::atomic<bool> healthy_{true};
  std::atomic<int64_t> host_alloc_calls_{0};
  std::atomic<int64_t> device_malloc_calls_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int ordinal, const CudaDeviceOptions& options) {
  auto device = std::make_unique<CudaDevice>(ordinal, std::max(1, options.streams_per_device));
  if (auto s = device->Init(options); !s.ok()) return s;
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace gpucompute::server::cuda

namespace gpucompute::server {

absl::StatusOr<std::vector<std::unique_ptr<Device>>> OpenCudaDevices(const CudaDeviceOptions& options) {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device found");
  std::vector<int> ordinals;
  if (options.devices == "all") {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  } else {
    for (absl::string_view part : absl::StrSplit(options.devices, ',', absl::SkipEmpty())) {
      int ordinal = -1;
      if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0 || ordinal >= count) {
        return absl::InvalidArgumentError(absl::StrCat("--devices: \"", std::string(part),
                                                       "\" is not a GPU index in [0, ", count, ")"));
      }
      ordinals.push_back(ordinal);
    }
  }
  std::vector<std::unique_ptr<Device>> devices;
  for (int ordinal : ordinals) {
    auto device = cuda::OpenCudaDevice(ordinal, options);
    if (!device.ok()) return device.status();
    devices.push_back(std::move(*device));
  }
  return devices;
}

}  // namespace gpucompute::server
