#include "server/grpc/compute_service.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/grpc/call_reactor.h"
#include "server/grpc/compute_request.h"
#include "server/grpc/control_calls.h"
#include "server/grpc/convert.h"
#include "server/grpc/profile_response.h"
#include "server/grpc/queued_call.h"
#include "server/grpc/rpc_ops.h"
#include "server/grpc/tensor_requests.h"
#include "server/ops/log.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {
namespace {

std::string WireDTypeName(kernels::DType dtype) { return ProtoDTypeName(ToProto(dtype)); }

// The variant a request's `field` names, as the engine decides it; its
// refusal names the field.
absl::StatusOr<const kernels::Variant*> RequestedVariant(const ComputeEngine& engine,
                                                         const kernels::Problem& problem,
                                                         const std::string& name,
                                                         const std::string& field) {
  auto v = engine.RequestedVariant(problem, name, &WireDTypeName);
  if (!v.ok())
    return absl::Status(v.status().code(), absl::StrCat(field, ": ", v.status().message()));
  return v;
}

}  // namespace

ComputeService::ComputeService(const kernels::Registry& registry, ServiceConfig config,
                               Metrics& metrics, const BearerTokenAuth* auth)
    : registry_(registry), config_(std::move(config)), metrics_(metrics), auth_(auth) {
  RegisterControlCalls();
  if (config_.compute_calls_on_queues) UnregisterComputeCalls();
}

namespace {

// The compute rpcs and their ops, for serving them as generic calls.
struct ComputeRpc {
  kernels::Op op;
  const char* name;
};
constexpr ComputeRpc kComputeRpcs[] = {{kernels::Op::kMatMul, "MatMul"},
                                       {kernels::Op::kTranspose, "Transpose"},
                                       {kernels::Op::kReduce, "Reduce"}};

}  // namespace

void ComputeService::UnregisterComputeCalls() {
  const google::protobuf::ServiceDescriptor& service = ComputeServiceDescriptor();
  for (const ComputeRpc& rpc : kComputeRpcs) {
    MarkMethodGeneric(service.FindMethodByName(rpc.name)->index());
  }
}

void ComputeService::RegisterControlCalls() {
  const google::protobuf::ServiceDescriptor& service = ComputeServiceDescriptor();
  for (ControlCall& call : ControlCalls()) {
    const google::protobuf::MethodDescriptor* method =
        service.FindMethodByName(std::string(call.rpc));
    if (method == nullptr) {
      LogError(absl::StrCat("control call ", call.rpc, ": the Compute service has no such rpc"));
      std::abort();
    }
    // gRPC's generated Service registered every method in descriptor order.
    MarkMethodRawCallback(
        method->index(),
        new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
            [this, op = RpcOpFor(call.rpc), answer = std::move(call.answer)](
                grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response) -> grpc::ServerUnaryReactor* {
              auto* reactor = new CallReactor(ctx, metrics_, op, calls_);
              ComputeEngine* engine = Admit(ctx, reactor);
              if (engine == nullptr) return reactor;
              answer(ControlContext{registry_, config_, *engine,
                                    regions_.load(std::memory_order_acquire)},
                     *reactor, request, response);
              return reactor;
            }));
  }
}

void ComputeService::Activate(ComputeEngine& engine, TensorTransfers* transfers,
                              SharedMemoryRegistry* regions) {
  transfers_.store(transfers, std::memory_order_release);
  regions_.store(regions, std::memory_order_release);
  engine_.store(&engine, std::memory_order_release);
}

absl::Status ComputeService::Readiness(grpc::ServerContextBase* ctx) const {
  if (auth_ != nullptr) {
    if (absl::Status s = auth_->Check(ctx->client_metadata()); !s.ok()) return s;
  }
  if (draining_.load(std::memory_order_acquire)) {
    return absl::UnavailableError(
        "server shutting down: it answers the calls in flight and takes no new ones (health "
        "reports NOT_SERVING)");
  }
  if (engine_.load(std::memory_order_acquire) == nullptr) {
    return absl::UnavailableError(
        "server starting: its devices are not open yet (health reports NOT_SERVING until then)");
  }
  return absl::OkStatus();
}

template <typename Call>
ComputeEngine* ComputeService::Admit(grpc::ServerContextBase* ctx, Call* reactor) const {
  if (absl::Status s = Readiness(ctx); !s.ok()) {
    reactor->Complete(s);
    return nullptr;
  }
  return engine_.load(std::memory_order_acquire);
}

// What one compute call keeps until it is answered: the request's slices
// (the payload spans point into them).
struct ComputeService::ComputeState {
  std::vector<grpc::Slice> slices;
  wire::ComputeRequest wire;
  kernels::Problem problem;
};

namespace {

// The request message of a compute call, for errors that name it.
const char* RequestName(kernels::Op op) {
  switch (op) {
    case kernels::Op::kMatMul: return "MatMulRequest";
    case kernels::Op::kTranspose: return "TransposeRequest";
    case kernels::Op::kReduce: return "ReduceRequest";
  }
  return "request";
}

v1::ExecutionReport ReportOf(const ComputeOutcome& outcome, const StageLatencies& latencies,
                             absl::Time received) {
  v1::ExecutionReport report;
  report.set_variant(outcome.variant->name);
  report.set_device(outcome.times.note.empty() ? outcome.device->description().name
                                               : absl::StrCat(outcome.device->description().name,
                                                              " (", outcome.times.note, ")"));
  report.set_queue_us(latencies.queue_us);
  report.set_upload_us(latencies.upload_us);
  report.set_compute_us(latencies.compute_us);
  report.set_download_us(latencies.download_us);
  report.set_total_us(latencies.total_us);
  report.set_batch_size(outcome.batch_size);
  report.set_received_unix_ns(absl::ToUnixNanos(received));
  return report;
}

// Operators see once per Profile why asked-for counters were not read (the
// first reason; the rows carry each).
void LogCountersUnread(const std::vector<VariantMeasurement>& measured,
                       const DeviceDescription& device) {
  for (const VariantMeasurement& m : measured) {
    if (!m.counters.empty()) continue;
    const std::string why =
        m.counters_note.empty() ? CountersUnavailableNote(device.backend) : m.counters_note;
    LogInfo(absl::StrCat("Profile asked for hardware counters on ", device.name, "; ",
                         m.variant->name, ": ", why));
    return;
  }
}

}  // namespace

template <typename Call>
void ComputeService::ServeCompute(grpc::ServerContextBase* ctx, Call* reactor, kernels::Op op,
                                  const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
  ComputeEngine* engine = Admit(ctx, reactor);
  if (engine == nullptr) return;

  auto state = std::make_shared<ComputeState>();
  // No message at all (the client half-closed without sending one, or
  // cancelled the call before it arrived) leaves the buffer invalid.
  if (!request->Valid() || !request->Dump(&state->slices).ok()) {
    reactor->Complete(NoRequestMessage(absl::StrCat("gpucompute.v1.", RequestName(op))));
    return;
  }
  auto parsed = wire::ParseComputeRequest(ToProto(op), state->slices);
  if (!parsed.ok()) {
    reactor->Complete(
        absl::InvalidArgumentError(absl::StrCat("request: ", parsed.status().message())));
    return;
  }
  state->wire = std::move(*parsed);
  const SharedMemoryRegistry* regions = regions_.load(std::memory_order_acquire);
  auto resolved =
      ResolveComputeRequest(op, state->wire, config_.limits, engine->tensors(), regions);
  if (!resolved.ok()) {
    reactor->Complete(resolved.status());
    return;
  }
  const kernels::Problem problem = resolved->problem;
  state->problem = problem;
  auto named = RequestedVariant(*engine, problem, state->wire.variant, "variant");
  if (!named.ok()) {
    reactor->Complete(named.status());
    return;
  }

  ComputeCall call;
  call.problem = problem;
  call.variant = *named;
  call.allow_reduced_precision = op == kernels::Op::kMatMul && state->wire.allow_tf32;
  call.a = state->wire.a.data;
  if (op == kernels::Op::kMatMul) call.b = state->wire.b.data;
  call.a_tensor = std::move(resolved->a_tensor);
  call.b_tensor = std::move(resolved->b_tensor);
  call.keep_output = resolved->placement.keep;
  call.keep_ttl = resolved->placement.ttl;
  call.a_region = std::move(resolved->a_slice);
  call.b_region = std::move(resolved->b_slice);
  call.out_region = std::move(resolved->out_slice);
  const bool into_region = call.out_region.has_value();
  call.buffers = &buffers_;
  call.lifetime = RequestLifetime{reactor->deadline(), reactor->cancelled()};
  engine->Compute(std::move(call), [this, reactor, response, state, into_region](
                                       absl::Status status, ComputeOutcome& outcome) {
    StageLatencies latencies;
    if (status.ok()) {
      const StageTimes& t = outcome.times;
      latencies = {outcome.queue_us,
                   t.upload_us,
                   t.compute_us,
                   t.download_us,
                   absl::ToInt64Microseconds(absl::Now() - reactor->received()),
                   outcome.batch_size};
      const kernels::Problem& p = state->problem;
      const v1::ExecutionReport report = ReportOf(outcome, latencies, reactor->received());
      if (into_region) {
        // No data: the matrix names the slice that holds the result.
        wire::SharedMemorySlice slice = state->wire.output.shared_memory;
        *response = wire::EncodeComputeResponseWithSharedMemory(
            ToProto(kernels::OutputDType(p)), kernels::OutputRows(p), kernels::OutputCols(p), slice,
            report);
      } else if (outcome.kept) {
        // No data: the matrix names the tensor that holds the result.
        *response = wire::EncodeComputeResponseWithTensor(
            ToProto(kernels::OutputDType(p)), kernels::OutputRows(p), kernels::OutputCols(p),
            outcome.kept->id, report);
      } else {
        *response = wire::EncodeComputeResponse(
            ToProto(kernels::OutputDType(p)), kernels::OutputRows(p), kernels::OutputCols(p),
            wire::SliceOwning(
                std::move(outcome.result),
                [this](std::unique_ptr<std::string> b) { buffers_.Release(std::move(b)); }),
            report);
      }
    }
    RequestLabels labels;
    labels.dtype = kernels::DTypeName(state->problem.dtype);
    if (outcome.variant != nullptr) labels.variant = outcome.variant->name;
    if (outcome.device != nullptr) labels.device = DeviceLabel(outcome.device->description().name);
    if (status.ok()) labels.bytes = int64_t(kernels::MinimalBytes(state->problem));
    reactor->Complete(status, std::move(labels), latencies);
  });
}

grpc::ServerUnaryReactor* ComputeService::RunCompute(grpc::CallbackServerContext* ctx,
                                                     kernels::Op op,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(ctx, metrics_, ComputeRpcOp(op), calls_);
  ServeCompute(ctx, reactor, op, request, response);
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::MatMul(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return RunCompute(ctx, kernels::Op::kMatMul, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Transpose(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return RunCompute(ctx, kernels::Op::kTranspose, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Reduce(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return RunCompute(ctx, kernels::Op::kReduce, request, response);
}

void ComputeService::BeginQueued(QueuedCall* call) {
  // "/gpucompute.v1.Compute/MatMul": the service's prefix, then the rpc.
  static const std::string kPrefix = absl::StrCat("/", ComputeServiceDescriptor().full_name(), "/");
  const std::string& method = call->context()->method();
  if (absl::StartsWith(method, kPrefix)) {
    const absl::string_view rpc = absl::string_view(method).substr(kPrefix.size());
    for (const ComputeRpc& compute : kComputeRpcs) {
      if (rpc == compute.name) {
        call->Read(compute.op);
        return;
      }
    }
  }
  call->Refuse(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ""));
}

void ComputeService::ServeQueued(QueuedCall* call) {
  call->Begin(metrics_, ComputeRpcOp(call->op()), calls_);
  ServeCompute(call->context(), call, call->op(), call->request(), call->response());
}

grpc::ServerUnaryReactor* ComputeService::Profile(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  static const RpcOp kProfile = RpcOpFor("Profile");
  auto* reactor = new CallReactor(ctx, metrics_, kProfile, calls_);
  ComputeEngine* engine = Admit(ctx, reactor);
  if (engine == nullptr) return reactor;
  v1::ProfileRequest parsed;
  if (!reactor->Parse(request, parsed)) return reactor;
  const v1::ProfileRequest* req = &parsed;
  v1::ProfileResponse* resp = reactor->Respond<v1::ProfileResponse>(response);
  auto problem = ValidateProfile(*req, config_.limits);
  if (!problem.ok()) {
    reactor->Complete(problem.status());
    return reactor;
  }
  ProfileCall call;
  ProfileJob& job = call.job;
  job.problem = *problem;
  job.warmup = req->warmup() > 0 ? req->warmup() : config_.profile_warmup;
  job.repetitions = req->repetitions() > 0 ? req->repetitions() : config_.profile_repetitions;
  job.seed = std::random_device{}();
  job.flush_cache = !req->warm_cache();
  job.read_counters = req->counters();
  for (int i = 0; i < req->variants_size(); ++i) {
    auto v =
        RequestedVariant(*engine, *problem, req->variants(i), absl::StrCat("variants[", i, "]"));
    if (!v.ok()) {
      reactor->Complete(v.status());
      return reactor;
    }
    if (*v == nullptr) {
      reactor->Complete(absl::InvalidArgumentError(
          absl::StrCat("variants[", i, "]: \"", req->variants(i),
                       "\" is not a variant; list names, or none for all")));
      return reactor;
    }
    job.variants.push_back(*v);
  }
  call.lifetime = RequestLifetime{reactor->deadline(), reactor->cancelled()};
  const bool counters = req->counters();
  engine->Profile(std::move(call), [reactor, resp, problem = *problem, seed = job.seed, counters](
                                       absl::Status status, const ProfileOutcome& outcome) {
    StageLatencies latencies;
    if (status.ok()) {
      latencies.queue_us = outcome.queue_us;
      const DeviceDescription& device = outcome.device->description();
      FillProfileResponse(problem, outcome.measured, device, outcome.device->ceilings(),
                          outcome.selected ? outcome.selected->name : "", resp, counters);
      resp->set_seed(seed);
      resp->set_cold_cache(outcome.flush_cache);
      if (counters) LogCountersUnread(outcome.measured, device);
    }
    RequestLabels labels;
    labels.dtype = kernels::DTypeName(problem.dtype);
    if (outcome.device != nullptr) labels.device = DeviceLabel(outcome.device->description().name);
    reactor->Complete(status, std::move(labels), latencies);
  });
  return reactor;
}

StreamContext ComputeService::stream_context() {
  return StreamContext{metrics_, calls_, regions_.load(std::memory_order_acquire), &buffers_};
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ComputeService::Upload(grpc::CallbackServerContext* ctx,
                                                                  grpc::ByteBuffer* response) {
  if (absl::Status s = Readiness(ctx); !s.ok()) return RefuseUpload(ctx, s, stream_context());
  return StartUpload(ctx, response, transfers_.load(std::memory_order_acquire), stream_context());
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ComputeService::Download(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  if (absl::Status s = Readiness(ctx); !s.ok()) return RefuseDownload(ctx, s, stream_context());
  v1::DownloadRequest parsed;
  if (!request->Valid()) {
    return RefuseDownload(ctx, NoRequestMessage(parsed.GetTypeName()), stream_context());
  }
  grpc::ByteBuffer bytes(*request);  // shares the slices; parsing consumes its copy
  if (!grpc::SerializationTraits<v1::DownloadRequest>::Deserialize(&bytes, &parsed).ok()) {
    return RefuseDownload(
        ctx, absl::InvalidArgumentError("request: not a DownloadRequest (unparsable bytes)"),
        stream_context());
  }
  return StartDownload(ctx, parsed, transfers_.load(std::memory_order_acquire), stream_context());
}

}  // namespace gpucompute::server
