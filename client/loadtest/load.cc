#include "loadtest/load.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/client_context.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gpucompute/client.h"
#include "gpucompute/kernels/problem.h"
#include "grpc/health/v1/health.pb.h"
#include "loadtest/tcp_echo.h"
#include "src/unary_call.h"
#include "wire/compute_wire.h"

namespace gpucompute::loadtest {
namespace {

template <typename Message>
absl::Status Serialize(const Message& message, grpc::ByteBuffer* out) {
  bool own = false;
  grpc::Status st = grpc::SerializationTraits<Message>::Serialize(message, out, &own);
  if (!st.ok()) return absl::InternalError(absl::StrCat("serializing: ", st.error_message()));
  return absl::OkStatus();
}

absl::StatusOr<Matrix> RandomInput(const Workload& w, int64_t rows, int64_t cols, uint64_t salt) {
  return Matrix::Random(w.dtype, rows, cols, w.seed * 1000003 + salt);
}

absl::Status CheckOutput(const Workload& w, const wire::Matrix& out, bool kept, bool shm) {
  if (shm) {
    if (out.payload != wire::Matrix::Payload::kSharedMemory || out.rows != w.OutputRows() ||
        out.cols != w.OutputCols()) {
      return absl::InternalError(
          absl::StrFormat("response names no %dx%d shared-memory result (rows %d, cols %d)",
                          w.OutputRows(), w.OutputCols(), out.rows, out.cols));
    }
    return absl::OkStatus();
  }
  if (kept) {
    if (out.payload != wire::Matrix::Payload::kTensorId || out.tensor_id.empty() ||
        out.rows != w.OutputRows() || out.cols != w.OutputCols()) {
      return absl::InternalError(
          absl::StrFormat("response holds no kept %dx%d tensor (rows %d, cols %d, tensor_id '%s')",
                          w.OutputRows(), w.OutputCols(), out.rows, out.cols, out.tensor_id));
    }
    return absl::OkStatus();
  }
  const int64_t bytes = w.ResponsePayloadBytes();
  if (out.rows != w.OutputRows() || out.cols != w.OutputCols() || out.data_bytes != bytes) {
    return absl::InternalError(
        absl::StrFormat("response holds a %dx%d matrix of %d bytes, expected %dx%d of %d bytes",
                        out.rows, out.cols, out.data_bytes, w.OutputRows(), w.OutputCols(), bytes));
  }
  return absl::OkStatus();
}

void SetUpContext(grpc::ClientContext* context, const CallSettings& settings) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + settings.deadline));
  if (!settings.authorization.empty())
    context->AddMetadata("authorization", settings.authorization);
}

// Records one finished call: its latency (response checking included) and
// the server's report, or the status code.
void RecordCompletion(const PreparedCall& call, const grpc::Status& status,
                      grpc::ByteBuffer* response, Clock::time_point start, Recorder* recorder) {
  if (!status.ok()) {
    recorder->Error(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
    return;
  }
  v1::ExecutionReport report;
  const bool has_report = call.has_report();
  absl::Status parsed = call.ParseResponse(response, &report);
  const Clock::duration latency = Clock::now() - start;
  if (parsed.ok()) {
    recorder->Ok(latency, has_report ? &report : nullptr);
  } else {
    recorder->Error("MALFORMED_RESPONSE");
  }
}

std::vector<std::unique_ptr<grpc::GenericStub>> StubsOn(const Channels& channels) {
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (const auto& channel : channels)
    stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
  return stubs;
}

// One RPC in flight: its context and buffers live until the callback.
struct InFlight {
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  Clock::time_point start;
};

// The open loop's caller: issue one call, record it when it completes.
class GrpcCaller {
 public:
  GrpcCaller(const Channels& channels, const PreparedCall* call, CallSettings settings)
      : stubs_(StubsOn(channels)), call_(call), settings_(std::move(settings)) {}

  // `start` is when the request counts as issued; `done` runs after recording.
  void Issue(Recorder* recorder, Clock::time_point start, std::function<void()> done) {
    auto* f = new InFlight;
    SetUpContext(&f->context, settings_);
    f->request = call_->request();  // a new reference to the same slices
    f->start = start;
    in_flight_.fetch_add(1);
    grpc::GenericStub& stub = *stubs_[next_stub_.fetch_add(1) % stubs_.size()];
    stub.UnaryCall(&f->context, call_->method(), grpc::StubOptions(), &f->request, &f->response,
                   [this, f, recorder, done = std::move(done)](grpc::Status status) {
                     RecordCompletion(*call_, status, &f->response, f->start, recorder);
                     delete f;
                     // Before the count drops, so that a follow-up call is
                     // counted before WaitIdle can see zero.
                     done();
                     if (in_flight_.fetch_sub(1) == 1) {
                       std::lock_guard<std::mutex> lock(mu_);
                       idle_.notify_all();
                     }
                   });
  }

  int in_flight() const { return in_flight_.load(); }

  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return in_flight_.load() == 0; });
  }

 private:
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;  // calls take turns
  std::atomic<size_t> next_stub_{0};
  const PreparedCall* call_;
  CallSettings settings_;
  std::atomic<int> in_flight_{0};
  std::mutex mu_;
  std::condition_variable idle_;
};

// How long a loop pauses before its next call after one the server could
// not take (the closed loop: UNAVAILABLE; the transfer loop: any error).
constexpr std::chrono::milliseconds kRetryPause{10};

// One closed-loop call: the reader that owns its completion.
struct QueuedCall {
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Status status;
  Clock::time_point start;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
};

// Each thread owns a completion queue and waits on it itself, so a
// completion wakes the very thread that issues the next call: no hand-off
// between gRPC's threads and the load generator's (at concurrency 1, one
// thread does it all). The calls are spread over one thread per core (or per
// channel, if more), each thread on one channel.
class ClosedLoop final : public Driver {
 public:
  ClosedLoop(const Channels& channels, const PreparedCall* call, CallSettings settings,
             int concurrency)
      : stubs_(StubsOn(channels)),
        call_(call),
        settings_(std::move(settings)),
        concurrency_(concurrency) {}

  void Start(Recorder* recorder) override {
    stopping_ = false;
    const int wanted = std::max(static_cast<int>(std::thread::hardware_concurrency()),
                                static_cast<int>(stubs_.size()));
    const int threads = std::clamp(wanted, 1, concurrency_);
    for (int t = 0; t < threads; ++t) {
      const int share = concurrency_ / threads + (t < concurrency_ % threads ? 1 : 0);
      grpc::GenericStub* stub = stubs_[t % stubs_.size()].get();
      workers_.emplace_back([this, recorder, share, stub] { Work(recorder, share, *stub); });
    }
  }

  void Stop() override {
    stopping_ = true;
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Work(Recorder* recorder, int share, grpc::GenericStub& stub) {
    grpc::CompletionQueue cq;
    int in_flight = 0;
    auto issue = [&] {
      auto* c = new QueuedCall;
      SetUpContext(&c->context, settings_);
      c->request = call_->request();  // a new reference to the same slices
      c->start = Clock::now();
      c->reader = stub.PrepareUnaryCall(&c->context, call_->method(), c->request, &cq);
      c->reader->StartCall();
      c->reader->Finish(&c->response, &c->status, c);
      ++in_flight;
    };
    for (int i = 0; i < share; ++i) issue();
    void* tag = nullptr;
    bool ok = false;
    while (in_flight > 0 && internal::NextEvent(cq, &tag, &ok, settings_.busy_poll)) {
      auto* c = static_cast<QueuedCall*>(tag);
      --in_flight;
      RecordCompletion(*call_, c->status, &c->response, c->start, recorder);
      // A server that is gone fails each call at once: pause before the
      // next, as the transfer loop does, rather than spin out a row of
      // hundreds of thousands of UNAVAILABLE a second.
      const bool unavailable = c->status.error_code() == grpc::StatusCode::UNAVAILABLE;
      delete c;
      if (unavailable && !stopping_.load()) std::this_thread::sleep_for(kRetryPause);
      if (!stopping_.load()) issue();
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }

  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  const PreparedCall* call_;
  CallSettings settings_;
  const int concurrency_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
};

class OpenLoop final : public Driver {
 public:
  OpenLoop(const Channels& channels, const PreparedCall* call, CallSettings settings, double rate,
           int max_outstanding, uint64_t seed)
      : caller_(channels, call, std::move(settings)),
        rate_(rate),
        max_outstanding_(max_outstanding),
        seed_(seed) {}

  void Start(Recorder* recorder) override {
    stopping_ = false;
    dispatcher_ = std::thread([this, recorder] { Dispatch(recorder); });
  }

  void Stop() override {
    stopping_ = true;
    dispatcher_.join();
    caller_.WaitIdle();
  }

 private:
  void Dispatch(Recorder* recorder) {
    std::mt19937_64 rng(seed_);
    std::exponential_distribution<double> gap(rate_);
    Clock::time_point next = Clock::now();
    while (!stopping_.load()) {
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      std::this_thread::sleep_until(next);
      if (caller_.in_flight() >= max_outstanding_) {
        recorder->Dropped();
        continue;
      }
      caller_.Issue(recorder, next, [] {});
    }
  }

  GrpcCaller caller_;
  const double rate_;
  const int max_outstanding_;
  const uint64_t seed_;
  std::thread dispatcher_;
  std::atomic<bool> stopping_{false};
};

class TcpEcho final : public Driver {
 public:
  TcpEcho(const TcpEchoServer* server, int64_t request_bytes, int64_t response_bytes,
          int concurrency)
      : server_(server),
        request_bytes_(request_bytes),
        response_bytes_(response_bytes),
        concurrency_(concurrency),
        request_(static_cast<size_t>(request_bytes), '\x5a') {}

  void Start(Recorder* recorder) override {
    stopping_ = false;
    for (int i = 0; i < concurrency_; ++i) {
      workers_.emplace_back([this, recorder] { Work(recorder); });
    }
  }

  void Stop() override {
    stopping_ = true;
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Work(Recorder* recorder) {
    const int fd = server_->Connect();
    if (fd < 0) {
      recorder->Error(server_->transport() == EchoTransport::kTcp ? "TCP_CONNECT_FAILED"
                                                                  : "UNIX_CONNECT_FAILED");
      return;
    }
    std::string response(static_cast<size_t>(response_bytes_), '\0');
    const int64_t header[2] = {request_bytes_, response_bytes_};
    while (!stopping_.load()) {
      const Clock::time_point start = Clock::now();
      if (!WriteFull(fd, reinterpret_cast<const char*>(header), sizeof header) ||
          !WriteFull(fd, request_.data(), request_bytes_) ||
          !ReadFull(fd, response.data(), response_bytes_)) {
        recorder->Error(server_->transport() == EchoTransport::kTcp ? "TCP_IO_FAILED"
                                                                    : "UNIX_IO_FAILED");
        break;
      }
      recorder->Ok(Clock::now() - start, nullptr);
    }
    close(fd);
  }

  const TcpEchoServer* const server_;
  const int64_t request_bytes_, response_bytes_;
  const int concurrency_;
  const std::string request_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
};

// Whether every value lies within +-tolerance of their mean.
bool WithinOfMean(const std::vector<double>& values, double tolerance) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= values.size();
  if (mean <= 0) return false;
  for (double v : values) {
    if (std::abs(v - mean) > tolerance * mean) return false;
  }
  return true;
}

// The workload as kernels/ states a shape; its functions do the arithmetic.
kernels::Problem ProblemOf(const Workload& w) {
  kernels::Problem p;
  p.op = w.op == v1::OP_MATMUL      ? kernels::Op::kMatMul
         : w.op == v1::OP_TRANSPOSE ? kernels::Op::kTranspose
                                    : kernels::Op::kReduce;
  p.dtype = w.dtype == DType::kFloat32 ? kernels::DType::kFloat32 : kernels::DType::kFloat64;
  p.m = w.m;
  p.n = w.n;
  p.k = w.k;
  p.reduce_axis = w.axis == v1::REDUCE_AXIS_PER_ROW      ? kernels::ReduceAxis::kPerRow
                  : w.axis == v1::REDUCE_AXIS_PER_COLUMN ? kernels::ReduceAxis::kPerColumn
                                                         : kernels::ReduceAxis::kAll;
  return p;
}

}  // namespace

std::string Workload::ShapeText() const { return gpucompute::ShapeText(op, {m, n, k}); }

int64_t Workload::OutputRows() const { return kernels::OutputRows(ProblemOf(*this)); }

int64_t Workload::OutputCols() const { return kernels::OutputCols(ProblemOf(*this)); }

int64_t Workload::RequestPayloadBytes() const {
  if (transfer != Transfer::kNone) {
    return transfer == Transfer::kUpload ? m * n * DTypeSize(dtype) : 0;
  }
  const kernels::Problem p = ProblemOf(*this);
  return (kernels::InputAElements(p) + kernels::InputBElements(p)) * kernels::ElementSize(p.dtype);
}

int64_t Workload::ResponsePayloadBytes() const {
  if (transfer != Transfer::kNone) {
    return transfer == Transfer::kDownload ? m * n * DTypeSize(dtype) : 0;
  }
  const kernels::Problem p = ProblemOf(*this);
  return kernels::OutputElements(p) * kernels::ElementSize(p.dtype);
}

absl::StatusOr<PreparedCall> PreparedCall::Create(const Workload& w, const std::string& variant,
                                                  const TensorPlacement* tensors,
                                                  const SharedMemoryPlacement* shm) {
  PreparedCall call;
  call.workload_ = w;
  if (tensors != nullptr || shm != nullptr) {
    // Operands by id and the output kept, or operands and output in shared
    // memory: the same fields as below, written with the wire writer (the
    // MatMul, Transpose and Reduce field numbers).
    wire::MessageWriter request;
    const v1::DType dtype = ToProto(w.dtype);
    const int64_t es = DTypeSize(w.dtype);
    wire::OutputPlacement keep;
    if (shm != nullptr) {
      call.shm_output_ = true;
      keep.has_shared_memory = true;
      keep.shared_memory = {shm->region, shm->out_offset, w.OutputRows() * w.OutputCols() * es};
    } else {
      call.releaser_ = tensors->releaser;
      keep.keep = true;
      keep.ttl_seconds = tensors->ttl_seconds;
    }
    auto operand = [&](int field, int64_t rows, int64_t cols, bool is_b) {
      if (shm != nullptr) {
        request.MatrixSharedMemoryField(
            field, dtype, rows, cols,
            {shm->region, is_b ? shm->b_offset : shm->a_offset, rows * cols * es});
      } else {
        request.MatrixTensorField(field, dtype, rows, cols, is_b ? tensors->b : tensors->a);
      }
    };
    switch (w.op) {
      case v1::OP_MATMUL:
        operand(1, w.m, w.k, false);
        operand(2, w.k, w.n, true);
        if (!variant.empty()) request.BytesField(3, variant);
        if (w.allow_tf32) request.VarintField(4, 1);
        call.method_ = "/gpucompute.v1.Compute/MatMul";
        break;
      case v1::OP_TRANSPOSE:
        operand(1, w.m, w.n, false);
        if (!variant.empty()) request.BytesField(2, variant);
        call.method_ = "/gpucompute.v1.Compute/Transpose";
        break;
      case v1::OP_REDUCE:
        operand(1, w.m, w.n, false);
        if (w.reduce_op != v1::REDUCE_OP_SUM) request.VarintField(2, uint64_t(w.reduce_op));
        if (w.axis != v1::REDUCE_AXIS_ALL) request.VarintField(3, uint64_t(w.axis));
        if (!variant.empty()) request.BytesField(4, variant);
        call.method_ = "/gpucompute.v1.Compute/Reduce";
        break;
      default:
        return absl::InvalidArgumentError("load test: op must be matmul, transpose or reduce");
    }
    request.OutputPlacementField(10, keep);
    call.request_ = request.Finish();
    return call;
  }
  absl::Status st;
  switch (w.op) {
    case v1::OP_MATMUL: {
      auto a = RandomInput(w, w.m, w.k, 1);
      if (!a.ok()) return a.status();
      auto b = RandomInput(w, w.k, w.n, 2);
      if (!b.ok()) return b.status();
      v1::MatMulRequest request;
      MoveToProto(std::move(*a), request.mutable_a());
      MoveToProto(std::move(*b), request.mutable_b());
      request.set_variant(variant);
      request.set_allow_tf32(w.allow_tf32);
      call.method_ = "/gpucompute.v1.Compute/MatMul";
      st = Serialize(request, &call.request_);
      break;
    }
    case v1::OP_TRANSPOSE: {
      auto input = RandomInput(w, w.m, w.n, 1);
      if (!input.ok()) return input.status();
      v1::TransposeRequest request;
      MoveToProto(std::move(*input), request.mutable_input());
      request.set_variant(variant);
      call.method_ = "/gpucompute.v1.Compute/Transpose";
      st = Serialize(request, &call.request_);
      break;
    }
    case v1::OP_REDUCE: {
      auto input = RandomInput(w, w.m, w.n, 1);
      if (!input.ok()) return input.status();
      v1::ReduceRequest request;
      MoveToProto(std::move(*input), request.mutable_input());
      request.set_op(w.reduce_op);
      request.set_axis(w.axis);
      request.set_variant(variant);
      call.method_ = "/gpucompute.v1.Compute/Reduce";
      st = Serialize(request, &call.request_);
      break;
    }
    default: return absl::InvalidArgumentError("load test: op must be matmul, transpose or reduce");
  }
  if (!st.ok()) return st;
  return call;
}

PreparedCall PreparedCall::HealthCheck() {
  PreparedCall call;
  call.method_ = "/grpc.health.v1.Health/Check";
  call.health_check_ = true;
  // An empty HealthCheckRequest (the server as a whole) is zero bytes.
  call.request_ = grpc::ByteBuffer(nullptr, 0);
  return call;
}

PreparedCall PreparedCall::ServiceCall() {
  PreparedCall call;
  call.method_ = "/gpucompute.v1.Compute/ListTensors";
  call.service_call_ = true;
  call.request_ = grpc::ByteBuffer(nullptr, 0);  // an empty ListTensorsRequest
  return call;
}

PreparedCall PreparedCall::Echo(const PreparedCall& op_call) {
  PreparedCall call = op_call;
  call.echo_ = true;
  return call;
}

absl::StatusOr<grpc::ByteBuffer> CallOnce(const std::shared_ptr<grpc::Channel>& channel,
                                          const PreparedCall& call, const CallSettings& settings) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  SetUpContext(&context, settings);
  grpc::ByteBuffer response;
  const grpc::Status status =
      internal::UnaryOnThisThread(stub, &context, call.method(), call.request(), &response, false);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat(call.method(), ": ", status.error_message()));
  }
  grpc::ByteBuffer parsed = response;  // ParseResponse may consume what it reads
  v1::ExecutionReport report;
  if (absl::Status st = call.ParseResponse(&parsed, &report); !st.ok()) return st;
  return response;
}

absl::Status PreparedCall::ParseResponse(grpc::ByteBuffer* buffer,
                                         v1::ExecutionReport* report) const {
  if (service_call_) {
    v1::ListTensorsResponse list;
    grpc::Status st =
        grpc::SerializationTraits<v1::ListTensorsResponse>::Deserialize(buffer, &list);
    if (!st.ok()) return absl::InternalError("ListTensors response could not be parsed");
    return absl::OkStatus();
  }
  if (health_check_) {
    grpc::health::v1::HealthCheckResponse health;
    grpc::Status st = grpc::SerializationTraits<grpc::health::v1::HealthCheckResponse>::Deserialize(
        buffer, &health);
    if (!st.ok()) return absl::InternalError("health response could not be parsed");
    if (health.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::UnavailableError("server is not SERVING");
    }
    return absl::OkStatus();
  }
  std::vector<grpc::Slice> slices;
  if (!buffer->Dump(&slices).ok()) return absl::InternalError("response could not be read");
  auto response = wire::ParseComputeResponse(slices);
  if (!response.ok()) return response.status();
  if (releaser_ != nullptr && response->output.payload == wire::Matrix::Payload::kTensorId &&
      !response->output.tensor_id.empty()) {
    releaser_->Add(response->output.tensor_id);  // whatever the checks below say
  }
  if (absl::Status s = CheckOutput(workload_, response->output, releaser_ != nullptr, shm_output_);
      !s.ok()) {
    return s;
  }
  *report = std::move(response->report);
  return absl::OkStatus();
}

void WindowStats::Merge(const WindowStats& other) {
  duration += other.duration;
  latencies_ns.insert(latencies_ns.end(), other.latencies_ns.begin(), other.latencies_ns.end());
  for (const auto& [code, count] : other.errors) errors[code] += count;
  dropped += other.dropped;
  has_server_report = has_server_report || other.has_server_report;
  queue_us += other.queue_us;
  upload_us += other.upload_us;
  compute_us += other.compute_us;
  download_us += other.download_us;
  server_total_us += other.server_total_us;
  batch_sum += other.batch_sum;
}

double WindowStats::Throughput() const {
  const double seconds = std::chrono::duration<double>(duration).count();
  return seconds > 0 ? latencies_ns.size() / seconds : 0;
}

int64_t WindowStats::Percentile(double p) const {
  if (latencies_ns.empty()) return 0;
  // Nearest rank: the smallest sample with at least p% of samples at or below it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * latencies_ns.size()));
  return latencies_ns[std::clamp<size_t>(rank, 1, latencies_ns.size()) - 1];
}

Recorder::Recorder() : since_(Clock::now()) {}

void Recorder::Ok(Clock::duration latency, const v1::ExecutionReport* report) {
  std::lock_guard<std::mutex> lock(mu_);
  current_.latencies_ns.push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count());
  if (report != nullptr) {
    current_.has_server_report = true;
    current_.queue_us += report->queue_us();
    current_.upload_us += report->upload_us();
    current_.compute_us += report->compute_us();
    current_.download_us += report->download_us();
    current_.server_total_us += report->total_us();
    current_.batch_sum += std::max(1, report->batch_size());
  }
}

void Recorder::Error(const std::string& code) {
  std::lock_guard<std::mutex> lock(mu_);
  ++current_.errors[code];
}

void Recorder::Dropped() {
  std::lock_guard<std::mutex> lock(mu_);
  ++current_.dropped;
}

int64_t Recorder::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = static_cast<int64_t>(current_.latencies_ns.size());
  for (const auto& [code, count] : current_.errors) n += count;
  return n;
}

WindowStats Recorder::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  WindowStats out = std::move(current_);
  current_ = WindowStats();
  out.duration = now - since_;
  since_ = now;
  return out;
}

TensorReleaser::TensorReleaser(const Client* client) : client_(client) {
  thread_ = std::thread([this] { Loop(); });
}

TensorReleaser::~TensorReleaser() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TensorReleaser::Add(std::string id) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_.push_back(std::move(id));
}

void TensorReleaser::ReleaseBatch(std::unique_lock<std::mutex>& lock) {
  if (queued_.empty()) return;
  std::vector<std::string> batch;
  batch.swap(queued_);
  lock.unlock();
  absl::StatusOr<v1::ReleaseTensorsResponse> r = client_->Release(batch);
  lock.lock();
  if (r.ok()) {
    released_ += r->released();
    failed_ += static_cast<int64_t>(batch.size()) - r->released();
  } else {
    failed_ += static_cast<int64_t>(batch.size());
  }
}

void TensorReleaser::ReleaseQueued(std::unique_lock<std::mutex>& lock) {
  while (!queued_.empty()) ReleaseBatch(lock);
}

void TensorReleaser::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  ReleaseQueued(lock);
}

void TensorReleaser::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // One call every 10 ms: kept outputs do not pile up against the tensor
    // budget, and the measured calls do not share the connection and the
    // server with a release each (draining until empty did just that: the
    // ids of the calls that finished during one release made the next).
    wake_.wait_for(lock, std::chrono::milliseconds(10));
    ReleaseBatch(lock);
  }
  ReleaseQueued(lock);
}

namespace {

class TransferLoop final : public Driver {
 public:
  TransferLoop(const Client* client, Transfer transfer, const Matrix* matrix,
               std::string download_id, int concurrency)
      : client_(client),
        transfer_(transfer),
        matrix_(matrix),
        download_id_(std::move(download_id)),
        concurrency_(concurrency) {}

  void Start(Recorder* recorder) override {
    stopping_ = false;
    for (int i = 0; i < concurrency_; ++i) {
      workers_.emplace_back([this, recorder] { Work(recorder); });
    }
  }

  void Stop() override {
    stopping_ = true;
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void Work(Recorder* recorder) {
    // Downloaded into the same matrix each time, as a client that keeps its
    // buffer would: its pages are touched once, not faulted in per request.
    Matrix downloaded;
    while (!stopping_.load()) {
      const Clock::time_point start = Clock::now();
      absl::Status status;
      if (transfer_ == Transfer::kUpload) {
        absl::StatusOr<Tensor> tensor = client_->Upload(*matrix_);
        const Clock::duration latency = Clock::now() - start;
        status = tensor.status();
        if (status.ok()) recorder->Ok(latency, nullptr);
        // The tensor is released here, after the clock stopped.
      } else {
        status = client_->Download(download_id_, downloaded);
        const Clock::duration latency = Clock::now() - start;
        if (status.ok()) recorder->Ok(latency, nullptr);
      }
      if (!status.ok()) {
        recorder->Error(absl::StatusCodeToString(status.code()));
        // Do not spin on a server that refuses.
        std::this_thread::sleep_for(kRetryPause);
      }
    }
  }

  const Client* client_;
  const Transfer transfer_;
  const Matrix* matrix_;
  const std::string download_id_;
  const int concurrency_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stopping_{false};
};

}  // namespace

std::unique_ptr<Driver> MakeTransferLoop(const Client* client, Transfer transfer,
                                         const Matrix* matrix, std::string download_id,
                                         int concurrency) {
  return std::make_unique<TransferLoop>(client, transfer, matrix, std::move(download_id),
                                        concurrency);
}

std::unique_ptr<Driver> MakeClosedLoop(Channels channels, const PreparedCall* call,
                                       CallSettings settings, int concurrency) {
  return std::make_unique<ClosedLoop>(channels, call, std::move(settings), concurrency);
}

std::unique_ptr<Driver> MakeOpenLoop(Channels channels, const PreparedCall* call,
                                     CallSettings settings, double rate, int max_outstanding,
                                     uint64_t seed) {
  return std::make_unique<OpenLoop>(channels, call, std::move(settings), rate, max_outstanding,
                                    seed);
}

std::unique_ptr<Driver> MakeTcpEcho(const TcpEchoServer* server, int64_t request_bytes,
                                    int64_t response_bytes, int concurrency) {
  return std::make_unique<TcpEcho>(server, request_bytes, response_bytes, concurrency);
}

Measurement Measure(Driver& driver, const MeasureSettings& settings, const TickFn& on_tick) {
  Recorder recorder;
  const Clock::time_point begin = Clock::now();
  const Clock::time_point give_up = begin + absl::ToChronoNanoseconds(settings.max_time);
  const auto tick = std::chrono::milliseconds(100);
  auto elapsed = [&] { return absl::FromChrono(Clock::now() - begin); };

  driver.Start(&recorder);
  const Clock::time_point warm = begin + absl::ToChronoNanoseconds(settings.warmup);
  // Warm-up lasts its time and at least one completion (connections, the
  // server's first calibration of a shape).
  while ((Clock::now() < warm || recorder.count() == 0) && Clock::now() < give_up) {
    std::this_thread::sleep_for(tick);
    on_tick(elapsed(), 0, nullptr);
  }
  Measurement result;
  auto count_answers = [&result](const WindowStats& w) {
    result.answered_ok += int64_t(w.latencies_ns.size());
    for (const auto& [code, n] : w.errors) result.answered_errors[code] += n;
  };
  count_answers(recorder.Take());

  std::vector<WindowStats> windows;
  bool stable = false;
  while (!stable && Clock::now() < give_up) {
    const Clock::time_point window_end = Clock::now() + absl::ToChronoNanoseconds(settings.window);
    while ((Clock::now() < window_end || recorder.count() < settings.min_requests_per_window) &&
           Clock::now() < give_up) {
      std::this_thread::sleep_for(tick);
      on_tick(elapsed(), static_cast<int>(windows.size()),
              windows.empty() ? nullptr : &windows.back());
    }
    windows.push_back(recorder.Take());
    count_answers(windows.back());
    std::sort(windows.back().latencies_ns.begin(), windows.back().latencies_ns.end());
    const int n = settings.stable_windows;
    if (static_cast<int>(windows.size()) >= n) {
      std::vector<double> throughput, p95;
      for (auto w = windows.end() - n; w != windows.end(); ++w) {
        throughput.push_back(w->Throughput());
        p95.push_back(static_cast<double>(w->Percentile(95)));
      }
      stable =
          WithinOfMean(throughput, settings.stability) && WithinOfMean(p95, settings.stability);
    }
  }
  driver.Stop();
  count_answers(recorder.Take());  // requests that were in flight at the end

  result.windows = static_cast<int>(windows.size());
  result.stable = stable;
  const size_t keep = std::min<size_t>(windows.size(), settings.stable_windows);
  for (auto w = windows.end() - keep; w != windows.end(); ++w) result.stats.Merge(*w);
  std::sort(result.stats.latencies_ns.begin(), result.stats.latencies_ns.end());
  return result;
}

}  // namespace gpucompute::loadtest
