// Echo: a call that does no work, beside which a compute call that moves the
// same bytes shows what the service adds to gRPC (the load test's
// --baseline=echo --echo_at=server).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grpc/call_reactor.h"
#include "server/grpc/compute_service.h"
#include "server/grpc/rpc_ops.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {
namespace {

// The answer's bytes: this block, referenced as many times as they need.
// Zero-initialized and never written, it lies in .bss: no bytes in the
// binary, and its pages are the kernel's shared zero page until read.
constexpr size_t kZeroBlockBytes = size_t{1} << 20;
char zero_block[kZeroBlockBytes];

// An EchoResponse whose payload is `bytes` zero bytes, none of them copied.
grpc::ByteBuffer ZeroResponse(int64_t bytes) {
  std::vector<grpc::Slice> zeros;
  for (int64_t left = bytes; left > 0; left -= int64_t(kZeroBlockBytes)) {
    const size_t n = size_t(std::min<int64_t>(left, int64_t(kZeroBlockBytes)));
    zeros.emplace_back(zero_block, n, grpc::Slice::STATIC_SLICE);
  }
  wire::MessageWriter out;
  out.SlicesField(1, absl::MakeSpan(zeros));  // EchoResponse.payload
  return out.Finish();
}

}  // namespace

grpc::ServerUnaryReactor* ComputeService::Echo(grpc::CallbackServerContext* ctx,
                                               const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* response) {
  static const RpcOp kEcho = RpcOpFor("Echo");
  auto* reactor = new CallReactor(ctx, metrics_, kEcho, calls_);
  // The token, drain and start-up, as compute calls.
  if (absl::Status s = Readiness(ctx); !s.ok()) {
    reactor->Complete(s);
    return reactor;
  }
  std::vector<grpc::Slice> slices;
  if (!request->Valid() || !request->Dump(&slices).ok()) {
    reactor->Complete(NoRequestMessage("gpucompute.v1.EchoRequest"));
    return reactor;
  }
  auto parsed = wire::ParseEchoRequest(slices);
  if (!parsed.ok()) {
    reactor->Complete(absl::InvalidArgumentError(absl::StrCat(
        "request: not a gpucompute.v1.EchoRequest (", parsed.status().message(), ")")));
    return reactor;
  }
  const int64_t bytes = parsed->response_bytes;
  const int64_t most = config_.limits.max_matrix_bytes;
  if (bytes < 0) {
    reactor->Complete(absl::InvalidArgumentError(
        absl::StrCat("response_bytes: ", bytes, " is negative (0 to ", most, ")")));
    return reactor;
  }
  if (bytes > most) {
    reactor->Complete(absl::ResourceExhaustedError(
        absl::StrCat("response_bytes: ", bytes, " is more than the largest response payload of ",
                     most, " bytes (--max_matrix_bytes)")));
    return reactor;
  }
  *response = ZeroResponse(bytes);
  reactor->Complete(absl::OkStatus());
  return reactor;
}

}  // namespace gpucompute::server
