#include "loadtest/grpc_echo.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <thread>
#include <vector>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_callback.h>
#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "gpucompute/v1/compute.grpc.pb.h"

namespace gpucompute::loadtest {
namespace {

// The gpucompute server gives its port the transport settings for large
// messages that clients use (ApplyLargeMessageTransport); so does the echo.
class LargeMessageTransportOption final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments* args) override { ApplyLargeMessageTransport(args); }
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*) override {}
};

// One slice of its own: the given buffer may reference the transport's read
// buffers, far larger than the message.
grpc::ByteBuffer OwnCopy(const grpc::ByteBuffer& response) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

// The compute methods registered as the gpucompute server registers them
// (raw callback unary handlers, request and response as byte buffers), so
// that the calls take the same path through gRPC up to the handler, which
// here only references the canned response.
class GrpcEchoServer::Service final
    : public v1::Compute::WithRawCallbackMethod_MatMul<v1::Compute::WithRawCallbackMethod_Transpose<
          v1::Compute::WithRawCallbackMethod_Reduce<v1::Compute::CallbackService>>> {
 public:
  Service(GrpcEchoServer* owner, grpc::ByteBuffer response)
      : owner_(owner), response_(std::move(response)) {}

  grpc::ServerUnaryReactor* MatMul(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override {
    return Answer(ctx, request, response);
  }
  grpc::ServerUnaryReactor* Transpose(grpc::CallbackServerContext* ctx,
                                      const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override {
    return Answer(ctx, request, response);
  }
  grpc::ServerUnaryReactor* Reduce(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override {
    return Answer(ctx, request, response);
  }

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
    *response = response_;  // a new reference to the same slice
    owner_->Count(static_cast<int64_t>(request->Length()),
                  static_cast<int64_t>(response_.Length()));
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  GrpcEchoServer* const owner_;
  const grpc::ByteBuffer response_;
};

// The same calls served as the gpucompute server serves them with
// --grpc_queues: generic calls, each message read from the call, on
// completion queues with one thread each.
class GrpcEchoServer::QueueService final {
 public:
  QueueService(GrpcEchoServer* owner, grpc::ByteBuffer response)
      : owner_(owner), response_(std::move(response)) {}
  void AddTo(grpc::ServerBuilder& builder, int queues) {
    builder.RegisterAsyncGenericService(&generic_);
    for (int i = 0; i < queues; ++i) queues_.push_back(builder.AddCompletionQueue());
  }
  void Start() {
    for (auto& q : queues_) threads_.emplace_back([this, cq = q.get()] { Serve(cq); });
  }
  // After the server's Shutdown.
  void Stop() {
    for (auto& q : queues_) q->Shutdown();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  struct Call {
    grpc::GenericServerContext ctx;
    grpc::GenericServerAsyncReaderWriter stream{&ctx};
    grpc::ByteBuffer request;
    enum { kAskedFor, kReading, kAnswering, kAnswered } phase = kAskedFor;
    bool done = false;  // gRPC is done with the call
  };
  static bool IsComputeCall(const std::string& method) {
    static const std::string kPrefix = absl::StrCat("/", v1::Compute::service_full_name(), "/");
    static const std::string kMethods[] = {kPrefix + "MatMul", kPrefix + "Transpose",
                                           kPrefix + "Reduce"};
    return std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods);
  }
  void Await(grpc::ServerCompletionQueue* cq) {
    auto* c = new Call;
    c->ctx.AsyncNotifyWhenDone(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(c) | 1));
    generic_.RequestCall(&c->ctx, &c->stream, cq, cq, c);
  }
  void Serve(grpc::ServerCompletionQueue* cq) {
    for (int i = 0; i < 4; ++i) Await(cq);
    void* tag;
    bool ok;
    while (cq->Next(&tag, &ok)) {
      const uintptr_t bits = reinterpret_cast<uintptr_t>(tag);
      auto* c = reinterpret_cast<Call*>(bits & ~uintptr_t{1});
      if ((bits & 1) != 0 || c->phase == Call::kAnswering) {
        if ((bits & 1) != 0) {
          c->done = true;
        } else {
          c->phase = Call::kAnswered;
        }
        if (c->done && c->phase == Call::kAnswered) delete c;
        continue;
      }
      if (c->phase == Call::kAskedFor) {
        if (!ok) {  // shutting down: no call came
          delete c;
          continue;
        }
        Await(cq);
        if (!IsComputeCall(c->ctx.method())) {
          c->phase = Call::kAnswering;
          c->stream.Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""), c);
          continue;
        }
        c->phase = Call::kReading;
        c->stream.Read(&c->request, c);
        continue;
      }
      owner_->Count(static_cast<int64_t>(c->request.Length()),
                    static_cast<int64_t>(response_.Length()));
      c->phase = Call::kAnswering;
      c->stream.WriteAndFinish(response_, grpc::WriteOptions(), grpc::Status::OK, c);
    }
  }

  GrpcEchoServer* const owner_;
  const grpc::ByteBuffer response_;
  grpc::AsyncGenericService generic_;
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
};

absl::StatusOr<std::unique_ptr<GrpcEchoServer>> GrpcEchoServer::Start(
    EchoTransport transport, const grpc::ByteBuffer& response, int queues) {
  std::unique_ptr<GrpcEchoServer> server(new GrpcEchoServer);
  std::string address = "127.0.0.1:0";
  if (transport == EchoTransport::kUnix) {
    absl::StatusOr<std::string> dir = MakePrivateSocketDir();
    if (!dir.ok()) return dir.status();
    server->dir_ = *dir;
    address = absl::StrCat("unix:", *dir, "/grpc_echo.sock");
  }
  grpc::ServerBuilder builder;
  if (queues > 0) {
    server->queue_service_ = std::make_unique<QueueService>(server.get(), OwnCopy(response));
    server->queue_service_->AddTo(builder, queues);
  } else {
    server->service_ = std::make_unique<Service>(server.get(), OwnCopy(response));
    builder.RegisterService(server->service_.get());
  }
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.SetOption(std::make_unique<LargeMessageTransportOption>());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::InternalError(absl::StrCat("gRPC echo baseline: cannot listen on ", address));
  }
  if (server->queue_service_ != nullptr) server->queue_service_->Start();
  server->target_ = transport == EchoTransport::kUnix ? address : absl::StrCat("127.0.0.1:", port);
  return server;
}

void GrpcEchoServer::Count(int64_t request_bytes, int64_t response_bytes) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  request_bytes_.fetch_add(request_bytes, std::memory_order_relaxed);
  response_bytes_.fetch_add(response_bytes, std::memory_order_relaxed);
}

GrpcEchoServer::~GrpcEchoServer() {
  if (server_ != nullptr) server_->Shutdown();
  if (queue_service_ != nullptr) queue_service_->Stop();
  server_.reset();
  if (!dir_.empty()) {
    unlink(absl::StrCat(dir_, "/grpc_echo.sock").c_str());
    rmdir(dir_.c_str());
  }
}

}  // namespace gpucompute::loadtest
