// What generates the load: closed and open loops of gRPC calls, the socket
// echo, and upload and download streams.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <random>
#include <thread>

#include <grpcpp/client_context.h>
#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "loadtest/load.h"
#include "loadtest/tcp_echo.h"
#include "src/unary_call.h"

namespace gpucompute::loadtest {

namespace {

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
    recorder->Ok(latency, has_report ? &report : nullptr, absl::ToUnixNanos(absl::Now()));
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

// The threads of a driver that runs its calls on threads of its own, and
// their stop flag: Stop() raises the flag and joins them.
class DriverThreads : public Driver {
 public:
  void Stop() override {
    stopping_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 protected:
  // Starts `count` threads, the i-th running work(i).
  template <typename Work>
  void StartThreads(int count, Work work) {
    stopping_ = false;
    for (int i = 0; i < count; ++i) threads_.emplace_back([work, i] { work(i); });
  }
  bool stopping() const { return stopping_.load(); }

 private:
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
};

// Each thread owns a completion queue and waits on it itself, so a
// completion wakes the very thread that issues the next call: no hand-off
// between gRPC's threads and the load generator's (at concurrency 1, one
// thread does it all). The calls are spread over one thread per core (or per
// channel, if more; or --load_threads), each thread on one channel.
class ClosedLoop final : public DriverThreads {
 public:
  ClosedLoop(const Channels& channels, const PreparedCall* call, CallSettings settings,
             int concurrency)
      : stubs_(StubsOn(channels)),
        call_(call),
        settings_(std::move(settings)),
        concurrency_(concurrency) {}

  void Start(Recorder* recorder) override {
    const int wanted = settings_.load_threads > 0
                           ? settings_.load_threads
                           : std::max(static_cast<int>(std::thread::hardware_concurrency()),
                                      static_cast<int>(stubs_.size()));
    const int threads = std::clamp(wanted, 1, concurrency_);
    StartThreads(threads, [this, recorder, threads](int t) {
      const int share = concurrency_ / threads + (t < concurrency_ % threads ? 1 : 0);
      Work(recorder, share, *stubs_[size_t(t) % stubs_.size()]);
    });
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
      if (unavailable && !stopping()) std::this_thread::sleep_for(kRetryPause);
      if (!stopping()) issue();
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }

  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  const PreparedCall* call_;
  CallSettings settings_;
  const int concurrency_;
};

class OpenLoop final : public Driver {
 public:
  // How soon a dispatcher waiting for its next arrival notices Stop().
  static constexpr std::chrono::milliseconds kStopCheck{10};

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
      // In slices, so that a row ends on time however far off the next
      // arrival of a low rate is.
      for (Clock::time_point now = Clock::now(); now < next && !stopping_.load();
           now = Clock::now()) {
        std::this_thread::sleep_for(std::min<Clock::duration>(next - now, kStopCheck));
      }
      if (stopping_.load()) break;
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

class TcpEcho final : public DriverThreads {
 public:
  TcpEcho(const TcpEchoServer* server, int64_t request_bytes, int64_t response_bytes,
          int concurrency)
      : server_(server),
        request_bytes_(request_bytes),
        response_bytes_(response_bytes),
        concurrency_(concurrency),
        request_(static_cast<size_t>(request_bytes), '\x5a') {}

  void Start(Recorder* recorder) override {
    StartThreads(concurrency_, [this, recorder](int) { Work(recorder); });
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
    while (!stopping()) {
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
};

class TransferLoop final : public DriverThreads {
 public:
  TransferLoop(const Client* client, Transfer transfer, const Matrix* matrix,
               std::string download_id, int concurrency)
      : client_(client),
        transfer_(transfer),
        matrix_(matrix),
        download_id_(std::move(download_id)),
        concurrency_(concurrency) {}

  void Start(Recorder* recorder) override {
    StartThreads(concurrency_, [this, recorder](int) { Work(recorder); });
  }

 private:
  void Work(Recorder* recorder) {
    // Downloaded into the same matrix each time, as a client that keeps its
    // buffer would: its pages are touched once, not faulted in per request.
    Matrix downloaded;
    while (!stopping()) {
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
};

}  // namespace

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

}  // namespace gpucompute::loadtest
