#include "server/grpc/compute_service.h"

#include <atomic>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/grpc/convert.h"
#include "server/grpc/profile_response.h"
#include "server/ops/log.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {
namespace {

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

}  // namespace

// A unary reactor that records cancellation so queued work can be abandoned,
// and counts its call in the metrics (and the access log) when it finishes.
class ComputeService::CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(grpc::CallbackServerContext* ctx, Metrics& metrics, RpcOp op,
              std::atomic<int64_t>& started, std::atomic<int64_t>& in_flight)
      : ctx_(ctx), metrics_(metrics), op_(op), deadline_(DeadlineOf(ctx)), in_flight_(in_flight) {
    metrics_.RequestStarted();
    started.fetch_add(1, std::memory_order_relaxed);
    in_flight_.fetch_add(1, std::memory_order_relaxed);
  }
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }
  absl::Time received() const { return received_; }
  absl::Time deadline() const { return deadline_; }

  // Records the outcome, then answers the client; called exactly once per
  // call. `variant` is the one that ran or was chosen ("" when none was).
  void Complete(absl::Status status, const std::string& variant = "",
                StageLatencies latencies = {}) {
    const absl::Time now = absl::Now();
    if (latencies.total_us < 0) latencies.total_us = absl::ToInt64Microseconds(now - received_);
    // A call the client gave up on ends as the client sees it, whatever the
    // work's own outcome was (it may have failed because the call went away).
    if (cancelled_->load() || ctx_->IsCancelled()) {
      status = now >= deadline_ ? absl::DeadlineExceededError("deadline passed")
                                : absl::CancelledError("cancelled by the client");
    } else if ((status.ok() || status.code() == absl::StatusCode::kCancelled) &&
               now >= deadline_) {
      // The work stops itself once the deadline passes ("abandoned"): that is
      // the deadline, not a cancellation.
      status = absl::DeadlineExceededError("deadline passed before the response was ready");
    }
    metrics_.RequestFinished(op_, variant, status.code(), latencies);
    if (!status.ok() && status.code() != absl::StatusCode::kCancelled &&
        status.code() != absl::StatusCode::kDeadlineExceeded) {
      LogWarning(absl::StrCat(RpcOpName(op_), " from ", ctx_->peer(), ": ",
                              absl::StatusCodeToString(status.code()), ": ", status.message()));
    }
    if (AccessLogEnabled()) {
      LogAccess(absl::StrCat(ctx_->peer(), " ", RpcOpName(op_), " ",
                             absl::StatusCodeToString(status.code()), " variant=",
                             variant.empty() ? "none" : variant, " total_us=",
                             latencies.total_us));
    }
    Finish(ToGrpcStatus(status));
  }

 private:
  grpc::CallbackServerContext* const ctx_;
  Metrics& metrics_;
  const RpcOp op_;
  const absl::Time received_ = absl::Now();
  const absl::Time deadline_;
  std::atomic<int64_t>& in_flight_;
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

ComputeService::ComputeService(const kernels::Registry& registry, ServiceConfig config,
                               Metrics& metrics, const BearerTokenAuth* auth)
    : registry_(registry), config_(std::move(config)), metrics_(metrics), auth_(auth) {}

void ComputeService::Activate(ComputeEngine& engine) {
  engine_.store(&engine, std::memory_order_release);
}

ComputeEngine* ComputeService::Admit(grpc::CallbackServerContext* ctx,
                                     CallReactor* reactor) const {
  if (auth_ != nullptr) {
    if (absl::Status s = auth_->Check(ctx->client_metadata()); !s.ok()) {
      reactor->Complete(s);
      return nullptr;
    }
  }
  ComputeEngine* engine = engine_.load(std::memory_order_acquire);
  if (engine == nullptr) {
    reactor->Complete(absl::UnavailableError(
        "server starting: its devices are not open yet (health reports NOT_SERVING until then)"));
  }
  return engine;
}

// What one compute call keeps until it is answered: the request's slices
// (the payload spans point into them) and the result buffer.
struct ComputeService::ComputeState {
  std::vector<grpc::Slice> slices;
  wire::ComputeRequest wire;
  kernels::Problem problem;
  std::unique_ptr<std::string> out;
};

namespace {

MatrixShape ShapeOf(const wire::Matrix& m) { return {m.dtype, m.rows, m.cols, m.data_bytes}; }

absl::StatusOr<kernels::Problem> Validate(kernels::Op op, const wire::ComputeRequest& r,
                                          const Limits& limits) {
  switch (op) {
    case kernels::Op::kMatMul: return ValidateMatMul(ShapeOf(r.a), ShapeOf(r.b), limits);
    case kernels::Op::kTranspose: return ValidateTranspose(ShapeOf(r.a), limits);
    case kernels::Op::kReduce:
      return ValidateReduce(ShapeOf(r.a), r.reduce_op, r.reduce_axis, limits);
  }
  return absl::InternalError("unknown op");
}

v1::ExecutionReport ReportOf(const ComputeOutcome& outcome, const StageLatencies& latencies) {
  v1::ExecutionReport report;
  report.set_variant(outcome.variant->name);
  report.set_device(outcome.device->description().name);
  report.set_queue_us(latencies.queue_us);
  report.set_upload_us(latencies.upload_us);
  report.set_compute_us(latencies.compute_us);
  report.set_download_us(latencies.download_us);
  report.set_total_us(latencies.total_us);
  return report;
}

}  // namespace

grpc::ServerUnaryReactor* ComputeService::RunCompute(grpc::CallbackServerContext* ctx, RpcOp rpc,
                                                     kernels::Op op,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(ctx, metrics_, rpc, calls_started_, calls_in_flight_);
  ComputeEngine* engine = Admit(ctx, reactor);
  if (engine == nullptr) return reactor;

  auto state = std::make_shared<ComputeState>();
  // No message at all (the client half-closed without sending one) leaves
  // the buffer invalid.
  if (!request->Valid() || !request->Dump(&state->slices).ok()) {
    reactor->Complete(absl::InvalidArgumentError("request: no request message was received"));
    return reactor;
  }
  auto parsed = wire::ParseComputeRequest(ToProto(op), state->slices);
  if (!parsed.ok()) {
    reactor->Complete(absl::InvalidArgumentError(
        absl::StrCat("request: ", parsed.status().message())));
    return reactor;
  }
  state->wire = std::move(*parsed);
  auto problem = Validate(op, state->wire, config_.limits);
  if (!problem.ok()) {
    reactor->Complete(problem.status());
    return reactor;
  }
  state->problem = *problem;
  auto named = ResolveVariant(registry_, engine->backend(), *problem, state->wire.variant,
                              "variant");
  if (!named.ok()) {
    reactor->Complete(named.status());
    return reactor;
  }

  ComputeCall call;
  call.problem = *problem;
  call.variant = *named;
  call.allow_reduced_precision = op == kernels::Op::kMatMul && state->wire.allow_tf32;
  call.a = state->wire.a.data;
  if (op == kernels::Op::kMatMul) call.b = state->wire.b.data;
  // A reused buffer: a fresh one would page-fault and zero-fill every byte.
  call.output = [this, state](size_t bytes) {
    state->out = buffers_.Acquire(bytes);
    return static_cast<void*>(state->out->data());
  };
  call.lifetime = RequestLifetime{reactor->deadline(), reactor->cancelled()};
  engine->Compute(std::move(call), [this, reactor, response, state](
                                       absl::Status status, const ComputeOutcome& outcome) {
    StageLatencies latencies;
    if (status.ok()) {
      const StageTimes& t = outcome.times;
      latencies = {outcome.queue_us, t.upload_us, t.compute_us, t.download_us,
                   absl::ToInt64Microseconds(absl::Now() - reactor->received())};
      const kernels::Problem& p = state->problem;
      *response = wire::EncodeComputeResponse(
          ToProto(p.dtype), kernels::OutputRows(p), kernels::OutputCols(p),
          wire::SliceOwning(std::move(state->out),
                            [this](std::unique_ptr<std::string> b) {
                              buffers_.Release(std::move(b));
                            }),
          ReportOf(outcome, latencies));
    }
    if (state->out) buffers_.Release(std::move(state->out));
    reactor->Complete(status, outcome.variant ? outcome.variant->name : "", latencies);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::MatMul(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return RunCompute(ctx, RpcOp::kMatMul, kernels::Op::kMatMul, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Transpose(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return RunCompute(ctx, RpcOp::kTranspose, kernels::Op::kTranspose, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Reduce(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return RunCompute(ctx, RpcOp::kReduce, kernels::Op::kReduce, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Profile(grpc::CallbackServerContext* ctx,
                                                  const v1::ProfileRequest* req,
                                                  v1::ProfileResponse* resp) {
  auto* reactor = new CallReactor(ctx, metrics_, RpcOp::kProfile, calls_started_, calls_in_flight_);
  ComputeEngine* engine = Admit(ctx, reactor);
  if (engine == nullptr) return reactor;
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
  for (int i = 0; i < req->variants_size(); ++i) {
    auto v = ResolveVariant(registry_, engine->backend(), *problem, req->variants(i),
                            absl::StrCat("variants[", i, "]"));
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
  engine->Profile(std::move(call), [reactor, resp, problem = *problem, seed = job.seed](
                                       absl::Status status, const ProfileOutcome& outcome) {
    StageLatencies latencies;
    if (status.ok()) {
      latencies.queue_us = outcome.queue_us;
      FillProfileResponse(problem, outcome.measured, outcome.device->description(),
                          outcome.device->ceilings(),
                          outcome.selected ? outcome.selected->name : "", resp);
      resp->set_seed(seed);
    }
    reactor->Complete(status, "", latencies);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                        const v1::ServerInfoRequest*,
                                                        v1::ServerInfo* resp) {
  auto* reactor = new CallReactor(ctx, metrics_, RpcOp::kServerInfo, calls_started_, calls_in_flight_);
  ComputeEngine* engine = Admit(ctx, reactor);
  if (engine == nullptr) return reactor;
  resp->set_version(config_.version);
  resp->set_backend(kernels::BackendName(engine->backend()));
  for (const auto& device : engine->devices()) {
    v1::DeviceInfo* info = resp->add_devices();
    info->set_name(device->description().name);
    info->set_memory_bytes(device->description().memory_bytes);
    info->set_multiprocessors(device->description().multiprocessors);
    const DeviceCounters counters = device->counters();
    info->set_healthy(counters.healthy);
    info->set_pool_reserved_bytes(counters.pool_reserved_bytes);
    info->set_pool_used_bytes(counters.pool_used_bytes);
    info->set_device_malloc_calls(counters.device_malloc_calls);
    info->set_pool_growths(counters.pool_growths);
    info->set_host_alloc_calls(counters.host_alloc_calls);
    info->set_peak_gbytes_per_s(device->ceilings().gbytes_per_s);
    info->set_peak_gflops_fp32(device->ceilings().gflops);
    info->set_peak_gflops_fp64(device->ceilings().GFlopsFor(kernels::DType::kFloat64));
  }
  for (const kernels::Variant* v : registry_.List(engine->backend())) {
    v1::VariantInfo* info = resp->add_variants();
    info->set_op(ToProto(v->op));
    info->set_name(v->name);
    info->set_description(v->description);
    for (kernels::DType d : v->dtypes) info->add_dtypes(ToProto(d));
    info->set_reduced_precision(v->reduced_precision);
  }
  resp->set_max_matrix_bytes(config_.limits.max_matrix_bytes);
  reactor->Complete(absl::OkStatus());
  return reactor;
}

}  // namespace gpucompute::server
