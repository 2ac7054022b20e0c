#include "loadtest/grpc_echo.h"

#include <unistd.h>

#include <climits>
#include <vector>

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

}  // namespace

// The compute methods registered as the gpucompute server registers them
// (raw callback unary handlers, request and response as byte buffers), so
// that the calls take the same path through gRPC up to the handler, which
// here only references the canned response.
class GrpcEchoServer::Service final
    : public v1::Compute::WithRawCallbackMethod_MatMul<v1::Compute::WithRawCallbackMethod_Transpose<
          v1::Compute::WithRawCallbackMethod_Reduce<v1::Compute::CallbackService>>> {
 public:
  Service(GrpcEchoServer* owner, const grpc::ByteBuffer& response) : owner_(owner) {
    // One slice of its own: the given buffer may reference the transport's
    // read buffers, far larger than the message.
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (response.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) bytes.append(s.begin(), s.end());
    }
    grpc::Slice slice(bytes);
    response_ = grpc::ByteBuffer(&slice, 1);
  }

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
    owner_->calls_.fetch_add(1, std::memory_order_relaxed);
    owner_->request_bytes_.fetch_add(static_cast<int64_t>(request->Length()),
                                     std::memory_order_relaxed);
    owner_->response_bytes_.fetch_add(static_cast<int64_t>(response_.Length()),
                                      std::memory_order_relaxed);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  GrpcEchoServer* const owner_;
  grpc::ByteBuffer response_;
};

absl::StatusOr<std::unique_ptr<GrpcEchoServer>> GrpcEchoServer::Start(
    EchoTransport transport, const grpc::ByteBuffer& response) {
  std::unique_ptr<GrpcEchoServer> server(new GrpcEchoServer);
  std::string address = "127.0.0.1:0";
  if (transport == EchoTransport::kUnix) {
    absl::StatusOr<std::string> dir = MakePrivateSocketDir();
    if (!dir.ok()) return dir.status();
    server->dir_ = *dir;
    address = absl::StrCat("unix:", *dir, "/grpc_echo.sock");
  }
  server->service_ = std::make_unique<Service>(server.get(), response);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.SetOption(std::make_unique<LargeMessageTransportOption>());
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || port == 0) {
    return absl::InternalError(absl::StrCat("gRPC echo baseline: cannot listen on ", address));
  }
  server->target_ = transport == EchoTransport::kUnix ? address : absl::StrCat("127.0.0.1:", port);
  return server;
}

GrpcEchoServer::~GrpcEchoServer() {
  if (server_ != nullptr) server_->Shutdown();
  server_.reset();
  if (!dir_.empty()) {
    unlink(absl::StrCat(dir_, "/grpc_echo.sock").c_str());
    rmdir(dir_.c_str());
  }
}

}  // namespace gpucompute::loadtest
