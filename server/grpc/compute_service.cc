#include "server/grpc/compute_service.h"

#include <atomic>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/grpc/convert.h"
#include "server/grpc/profile_response.h"
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
// and counts its call in the metrics when it finishes.
class ComputeService::CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(Metrics& metrics, RpcOp op) : metrics_(metrics), op_(op) {
    metrics_.RequestStarted();
  }
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }
  absl::Time received() const { return received_; }

  // Records the outcome, then answers the client; called exactly once per
  // call. `variant` is the one that ran or was chosen ("" when none was).
  void Complete(const absl::Status& status, const std::string& variant = "",
                StageLatencies latencies = {}) {
    if (latencies.total_us < 0) {
      latencies.total_us = absl::ToInt64Microseconds(absl::Now() - received_);
    }
    metrics_.RequestFinished(op_, variant, status.code(), latencies);
    Finish(ToGrpcStatus(status));
  }

 private:
  Metrics& metrics_;
  const RpcOp op_;
  const absl::Time received_ = absl::Now();
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

ComputeService::ComputeService(const kernels::Registry& registry, ServiceConfig config,
                               Metrics& metrics, const BearerTokenAuth* auth)
    : registry_(registry), config_(std::move(config)), metrics_(metrics), auth_(auth) {}

void ComputeService::Activate(Scheduler& scheduler, VariantSelector& selector,
                              kernels::Backend backend) {
  runtime_storage_ = Runtime{&scheduler, &selector, backend};
  runtime_.store(&runtime_storage_, std::memory_order_release);
}

const ComputeService::Runtime* ComputeService::Admit(grpc::CallbackServerContext* ctx,
                                                     CallReactor* reactor) const {
  if (auth_ != nullptr) {
    if (absl::Status s = auth_->Check(ctx->client_metadata()); !s.ok()) {
      reactor->Complete(s);
      return nullptr;
    }
  }
  const Runtime* runtime = runtime_.load(std::memory_order_acquire);
  if (runtime == nullptr) {
    reactor->Complete(absl::UnavailableError(
        "server starting: its devices are not open yet (health reports NOT_SERVING until then)"));
  }
  return runtime;
}

// What one compute call keeps until it is answered: the request's slices
// (the payload spans point into them), the result buffer, and what ran.
struct ComputeService::ComputeState {
  std::vector<grpc::Slice> slices;
  wire::ComputeRequest wire;
  kernels::Problem problem;
  std::unique_ptr<std::string> out;
  StageTimes times;
  const kernels::Variant* ran = nullptr;
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

}  // namespace

grpc::ServerUnaryReactor* ComputeService::RunCompute(grpc::CallbackServerContext* ctx,
                                                     CallReactor* reactor, const Runtime& runtime,
                                                     kernels::Op op,
                                                     const grpc::ByteBuffer* request,
                                                     grpc::ByteBuffer* response) {
  auto state = std::make_shared<ComputeState>();
  if (!request->Dump(&state->slices).ok()) {
    reactor->Complete(absl::InternalError("request: the received message could not be read"));
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
  auto named = ResolveVariant(registry_, runtime.backend, *problem, state->wire.variant, "variant");
  if (!named.ok()) {
    reactor->Complete(named.status());
    return reactor;
  }
  const bool allow_reduced = op == kernels::Op::kMatMul && state->wire.allow_tf32;
  VariantSelector& selector = *runtime.selector;
  VariantSelector::Choice choice;
  if (*named) {
    choice.variant = *named;
  } else {
    choice = selector.Choose(*problem, allow_reduced);
  }
  if (choice.variant == nullptr) {
    reactor->Complete(absl::InvalidArgumentError(
        absl::StrCat("variant: no ", kernels::OpName(problem->op), " variant supports ",
                     kernels::DTypeName(problem->dtype), " on this server")));
    return reactor;
  }
  state->ran = choice.variant;

  Task task;
  task.deadline = DeadlineOf(ctx);
  task.cancelled = reactor->cancelled();
  const absl::Time deadline = task.deadline;
  task.run = [this, &selector, state, choice, allow_reduced, cancelled = task.cancelled,
              deadline](Device& device) {
    const StopRequested stop = [cancelled, deadline] {
      return cancelled->load() || absl::Now() > deadline;
    };
    ComputeJob job;
    job.problem = state->problem;
    job.variant = choice.variant;
    if (choice.calibrate) {
      // First request of this shape bucket: time every candidate once.
      ProfileJob calibration{VariantSelector::CalibrationProblem(job.problem), choice.candidates,
                             1, 3, std::random_device{}()};
      auto measured = device.Measure(calibration, stop);
      if (measured.ok()) {
        selector.Record(job.problem, *measured);
        if (const kernels::Variant* best = selector.Select(job.problem, allow_reduced)) {
          job.variant = best;
        }
      } else {
        selector.AbandonCalibration(job.problem);
      }
    }
    state->ran = job.variant;
    job.a = state->wire.a.data;
    if (job.problem.op == kernels::Op::kMatMul) job.b = state->wire.b.data;
    // A reused buffer: a fresh one would page-fault and zero-fill every byte.
    state->out = buffers_.Acquire(
        size_t(kernels::OutputElements(job.problem) * kernels::ElementSize(job.problem.dtype)));
    job.out = state->out->data();
    auto result = device.Execute(job, stop);
    if (!result.ok()) return result.status();
    state->times = *result;
    return absl::OkStatus();
  };
  task.done = [this, reactor, response, state](absl::Status status, Device* device,
                                               int64_t queue_us) {
    StageLatencies latencies;
    if (status.ok()) {
      const StageTimes& t = state->times;
      latencies = {queue_us, t.upload_us, t.compute_us, t.download_us,
                   absl::ToInt64Microseconds(absl::Now() - reactor->received())};
      v1::ExecutionReport report;
      report.set_variant(state->ran->name);
      report.set_device(device->description().name);
      report.set_queue_us(latencies.queue_us);
      report.set_upload_us(latencies.upload_us);
      report.set_compute_us(latencies.compute_us);
      report.set_download_us(latencies.download_us);
      report.set_total_us(latencies.total_us);
      const kernels::Problem& p = state->problem;
      *response = wire::EncodeComputeResponse(
          ToProto(p.dtype), kernels::OutputRows(p), kernels::OutputCols(p),
          wire::SliceOwning(std::move(state->out),
                      [this](std::unique_ptr<std::string> b) { buffers_.Release(std::move(b)); }),
          report);
    }
    buffers_.Release(std::move(state->out));
    reactor->Complete(status, state->ran->name, latencies);
  };
  runtime.scheduler->Submit(std::move(task));
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::MatMul(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(metrics_, RpcOp::kMatMul);
  const Runtime* runtime = Admit(ctx, reactor);
  if (runtime == nullptr) return reactor;
  return RunCompute(ctx, reactor, *runtime, kernels::Op::kMatMul, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Transpose(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(metrics_, RpcOp::kTranspose);
  const Runtime* runtime = Admit(ctx, reactor);
  if (runtime == nullptr) return reactor;
  return RunCompute(ctx, reactor, *runtime, kernels::Op::kTranspose, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Reduce(grpc::CallbackServerContext* ctx,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  auto* reactor = new CallReactor(metrics_, RpcOp::kReduce);
  const Runtime* runtime = Admit(ctx, reactor);
  if (runtime == nullptr) return reactor;
  return RunCompute(ctx, reactor, *runtime, kernels::Op::kReduce, request, response);
}

grpc::ServerUnaryReactor* ComputeService::Profile(grpc::CallbackServerContext* ctx,
                                                  const v1::ProfileRequest* req,
                                                  v1::ProfileResponse* resp) {
  auto* reactor = new CallReactor(metrics_, RpcOp::kProfile);
  const Runtime* runtime = Admit(ctx, reactor);
  if (runtime == nullptr) return reactor;
  auto problem = ValidateProfile(*req, config_.limits);
  if (!problem.ok()) {
    reactor->Complete(problem.status());
    return reactor;
  }
  ProfileJob job;
  job.problem = *problem;
  job.warmup = req->warmup() > 0 ? req->warmup() : config_.profile_warmup;
  job.repetitions = req->repetitions() > 0 ? req->repetitions() : config_.profile_repetitions;
  job.seed = std::random_device{}();
  for (int i = 0; i < req->variants_size(); ++i) {
    auto v = ResolveVariant(registry_, runtime->backend, *problem, req->variants(i),
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
  if (job.variants.empty()) {
    for (const kernels::Variant* v : registry_.List(problem->op, runtime->backend)) {
      if (v->Supports(problem->dtype)) job.variants.push_back(v);
    }
  }

  auto measured = std::make_shared<std::vector<VariantMeasurement>>();
  auto cancelled = reactor->cancelled();
  const absl::Time deadline = DeadlineOf(ctx);
  Task task;
  task.deadline = deadline;
  task.cancelled = cancelled;
  task.run = [job, measured, cancelled, deadline](Device& device) {
    auto result = device.Measure(
        job, [cancelled, deadline] { return cancelled->load() || absl::Now() > deadline; });
    if (!result.ok()) return result.status();
    *measured = std::move(*result);
    return absl::OkStatus();
  };
  VariantSelector& selector = *runtime->selector;
  task.done = [&selector, reactor, resp, measured, job](absl::Status status, Device* device,
                                                        int64_t queue_us) {
    StageLatencies latencies;
    if (status.ok()) {
      latencies.queue_us = queue_us;
      selector.Record(job.problem, *measured);
      const kernels::Variant* selected = selector.Select(job.problem, false);
      FillProfileResponse(job.problem, *measured, device->description(), device->ceilings(),
                          selected ? selected->name : "", resp);
      resp->set_seed(job.seed);
    }
    reactor->Complete(status, "", latencies);
  };
  runtime->scheduler->Submit(std::move(task));
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                        const v1::ServerInfoRequest*,
                                                        v1::ServerInfo* resp) {
  auto* reactor = new CallReactor(metrics_, RpcOp::kServerInfo);
  const Runtime* runtime = Admit(ctx, reactor);
  if (runtime == nullptr) return reactor;
  resp->set_version(config_.version);
  resp->set_backend(kernels::BackendName(runtime->backend));
  for (const auto& device : runtime->scheduler->devices()) {
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
  for (const kernels::Variant* v : registry_.List(runtime->backend)) {
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
