// The load generator: a workload serialized once, drivers that keep it in
// flight (closed loop at a fixed concurrency, open loop at a Poisson rate, and
// a plain TCP echo as the transport ceiling), and the measurement loop that
// runs windows until throughput and p95 are stable.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/message.h>
#include <grpcpp/channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/client.h"
#include "gpucompute/matrix.h"
#include "gpucompute/v1/compute.pb.h"
#include "loadtest/tcp_echo.h"

namespace gpucompute::loadtest {

using Clock = std::chrono::steady_clock;

// Stream rows (--op=upload|download): one Upload or Download of an m x n
// matrix per request instead of a compute call.
enum class Transfer { kNone, kUpload, kDownload };

struct Workload {
  v1::Op op = v1::OP_MATMUL;
  Transfer transfer = Transfer::kNone;  // kUpload/kDownload: m x n moved by the stream
  DType dtype = DType::kFloat32;
  // MATMUL: a is m x k, b is k x n. TRANSPOSE/REDUCE: the input is m x n.
  int64_t m = 0, n = 0, k = 0;
  v1::ReduceOp reduce_op = v1::REDUCE_OP_SUM;
  v1::ReduceAxis axis = v1::REDUCE_AXIS_ALL;
  bool allow_tf32 = false;
  uint64_t seed = 1;

  std::string ShapeText() const;  // "1024x512x256" (MxKxN) or "4096x4096"
  // Transfers: upload sends m*n elements and receives none; download the reverse.
  int64_t RequestPayloadBytes() const;   // matrix bytes sent
  int64_t ResponsePayloadBytes() const;  // matrix bytes received
  int64_t OutputRows() const;
  int64_t OutputCols() const;
};

// Releases the tensors that kept outputs name, in batches from a thread of
// its own, so that a request's latency does not include its release.
class TensorReleaser {
 public:
  explicit TensorReleaser(const Client* client);
  ~TensorReleaser();  // releases what is queued, then stops
  void Add(std::string id);
  // Releases everything queued so far before returning.
  void Flush();
  int64_t released() const { return released_.load(); }
  int64_t failed() const { return failed_.load(); }

 private:
  void Loop();
  // One ReleaseTensors call for everything queued now.
  void ReleaseBatch(std::unique_lock<std::mutex>& lock);
  // Batches until nothing is queued.
  void ReleaseQueued(std::unique_lock<std::mutex>& lock);
  const Client* client_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::string> queued_;
  bool stopping_ = false;
  std::atomic<int64_t> released_{0}, failed_{0};
  std::thread thread_;
};

// --placement=tensor: the operands held by the server (uploaded once) and
// where kept outputs go to be released.
struct TensorPlacement {
  std::string a, b;  // tensor ids; b for matmul only
  TensorReleaser* releaser = nullptr;
  int64_t ttl_seconds = 0;
};

// --placement=shm: the operands and the output in one registered
// shared-memory region (the server must share this host). Every call names
// the same slices, so concurrent calls write the same output bytes.
struct SharedMemoryPlacement {
  std::string region;
  int64_t a_offset = 0, b_offset = 0, out_offset = 0;
};

// One RPC of the workload for one variant, serialized once: every call sends
// the same reference-counted slices, so no payload byte is copied per request.
class PreparedCall {
 public:
  // `tensors` given: the operands are named by id and the output is kept
  // (then released through tensors->releaser), so no matrix bytes move.
  // `shm` given: the operands and the output are slices of its region.
  static absl::StatusOr<PreparedCall> Create(const Workload& workload, const std::string& variant,
                                             const TensorPlacement* tensors = nullptr,
                                             const SharedMemoryPlacement* shm = nullptr);
  // The standard grpc.health.v1 Check with an empty request: a round trip
  // through the same channel and server that does no work, the gRPC floor.
  static PreparedCall HealthCheck();
  // ListTensors: a round trip through the Compute service's own handling
  // (its reactor, metrics, authentication) that touches no device; beside
  // the health Check, what the service adds to gRPC's floor.
  static PreparedCall ServiceCall();
  // `op_call`'s method and request, sent to the gRPC echo server
  // (grpc_echo.h), whose canned answer is a response of that op: the same
  // bytes both ways and the same checks of the answer, without the server's
  // report (the echo's is a copy of one call's).
  static PreparedCall Echo(const PreparedCall& op_call);
  // The server's own Echo rpc carrying `op_call`'s request as its payload
  // and asking for `response_bytes` back: the op's bytes both ways through
  // the server's gRPC, with no work behind them.
  static PreparedCall ServerEcho(const PreparedCall& op_call, int64_t response_bytes);

  const std::string& method() const { return method_; }
  const grpc::ByteBuffer& request() const { return request_; }
  // Checks the result's shape and size in `buffer` and extracts the
  // server's report, reading the slices in place: a load generator has no use
  // for a copy of the payload.
  absl::Status ParseResponse(grpc::ByteBuffer* buffer, v1::ExecutionReport* report) const;
  // Whether responses carry an ExecutionReport (compute calls do).
  bool has_report() const {
    return !health_check_ && !service_call_ && !echo_ && server_echo_bytes_ < 0;
  }

 private:
  Workload workload_;
  TensorReleaser* releaser_ = nullptr;  // set: responses carry kept tensors
  bool shm_output_ = false;             // responses name the output's slice
  std::string method_;
  grpc::ByteBuffer request_;
  bool health_check_ = false;
  bool service_call_ = false;
  bool echo_ = false;
  int64_t server_echo_bytes_ = -1;  // a server Echo: the payload it must answer with
};

// Completions of one measurement window.
struct WindowStats {
  Clock::duration duration{};
  std::vector<int64_t> latencies_ns;      // successful requests
  std::map<std::string, int64_t> errors;  // status code name -> count
  int64_t dropped = 0;                    // open loop: arrivals over --max_outstanding
  bool has_server_report = false;
  int64_t queue_us = 0, upload_us = 0, compute_us = 0, download_us = 0, server_total_us = 0;
  // ExecutionReport.batch_size summed over the reports, 0 (alone, or a server
  // from before batching) counted as 1.
  int64_t batch_sum = 0;
  // Over the reports that carry ExecutionReport.received_unix_ns: the way in
  // (sent -> the server took it) and the way out (the server's total past
  // that -> answered here), summed, on the two hosts' wall clocks.
  int64_t stamped = 0, way_in_ns = 0, way_out_ns = 0;

  void Merge(const WindowStats& other);
  double Throughput() const;           // successful requests per second
  int64_t Percentile(double p) const;  // nanoseconds; latencies_ns must be sorted
};

// Collects completions from many threads; the measurement loop takes one
// window at a time.
class Recorder {
 public:
  Recorder();
  // `answered_unix_ns`: this host's wall clock when the answer was read
  // (0: not taken), for the way in and out of a report that says when the
  // server took the request.
  void Ok(Clock::duration latency, const v1::ExecutionReport* report, int64_t answered_unix_ns = 0);
  void Error(const std::string& code);
  void Dropped();
  int64_t count() const;
  // The completions since the last Take, and their wall-clock span.
  WindowStats Take();

 private:
  mutable std::mutex mu_;
  WindowStats current_;
  Clock::time_point since_;
};

// Keeps requests in flight until Stop, reporting each completion.
class Driver {
 public:
  virtual ~Driver() = default;
  virtual void Start(Recorder* recorder) = 0;
  // Stops issuing and waits for the requests in flight.
  virtual void Stop() = 0;
};

struct CallSettings {
  absl::Duration deadline = absl::Seconds(60);
  std::string authorization;  // "Bearer <token>", or empty
  bool busy_poll = false;
  // Closed loop: threads that issue the calls; 0: one per core, at least
  // one per channel.
  int load_threads = 0;
};

// Channels to the server, each with its own connection when more than one;
// drivers spread their calls over them.
using Channels = std::vector<std::shared_ptr<grpc::Channel>>;

// One call of `call` on `channel`, checked as its rows check theirs; the
// response as the server encoded it.
absl::StatusOr<grpc::ByteBuffer> CallOnce(const std::shared_ptr<grpc::Channel>& channel,
                                          const PreparedCall& call, const CallSettings& settings);

// `concurrency` requests always in flight.
std::unique_ptr<Driver> MakeClosedLoop(Channels channels, const PreparedCall* call,
                                       CallSettings settings, int concurrency);
// Poisson arrivals at `rate` per second, whatever the completions do;
// latency counts from the scheduled arrival, so a stalled server cannot hide
// its backlog. At most `max_outstanding` in flight; further arrivals are
// counted as dropped.
std::unique_ptr<Driver> MakeOpenLoop(Channels channels, const PreparedCall* call,
                                     CallSettings settings, double rate, int max_outstanding,
                                     uint64_t seed);
// `concurrency` connections to the echo server (loopback TCP or a unix
// socket), each sending the request payload and reading the response back.
std::unique_ptr<Driver> MakeTcpEcho(const TcpEchoServer* server, int64_t request_bytes,
                                    int64_t response_bytes, int concurrency);
// `concurrency` threads, each streaming one request after another through
// `client`: Upload of `matrix` (the tensor released after the clock stops),
// or Download of tensor `download_id`.
std::unique_ptr<Driver> MakeTransferLoop(const Client* client, Transfer transfer,
                                         const Matrix* matrix, std::string download_id,
                                         int concurrency);

struct MeasureSettings {
  absl::Duration warmup = absl::Seconds(1);
  absl::Duration window = absl::Seconds(1);
  int min_requests_per_window = 20;
  int stable_windows = 3;                       // consecutive windows that must agree
  double stability = 0.10;                      // within +-10% of their mean
  absl::Duration max_time = absl::Seconds(30);  // per row, warm-up included
};

struct Measurement {
  WindowStats stats;  // the last `stable_windows` windows merged, latencies sorted
  int windows = 0;    // measured after warm-up
  bool stable = false;
  // Every answer the row received, warm-up and earlier windows included:
  // what the server's request counters see.
  int64_t answered_ok = 0;
  std::map<std::string, int64_t> answered_errors;
};

// `on_tick(elapsed, windows so far, last window)` is called about every 100 ms
// for progress display.
using TickFn = std::function<void(absl::Duration elapsed, int windows, const WindowStats* last)>;
Measurement Measure(Driver& driver, const MeasureSettings& settings, const TickFn& on_tick);

}  // namespace gpucompute::loadtest
