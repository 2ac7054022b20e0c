#include "server/service.h"

#include <atomic>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/convert.h"
#include "server/profile.h"

namespace gpucompute::server {
namespace {

// A unary reactor that records cancellation so queued work can be abandoned.
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override { cancelled_->store(true); }
  void OnDone() override { delete this; }
  std::shared_ptr<std::atomic<bool>> cancelled() const { return cancelled_; }

 private:
  std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
};

absl::Time DeadlineOf(const grpc::CallbackServerContext* ctx) {
  const auto deadline = ctx->deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

CallReactor* FinishNow(const absl::Status& status) {
  auto* reactor = new CallReactor;
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

ComputeService::ComputeService(const kernels::Registry& registry, Scheduler& scheduler,
                               VariantSelector& selector, ServiceConfig config)
    : registry_(registry), scheduler_(scheduler), selector_(selector), config_(std::move(config)) {}

grpc::ServerUnaryReactor* ComputeService::RunCompute(
    grpc::CallbackServerContext* ctx, absl::StatusOr<kernels::Problem> problem,
    const std::string& variant_name, bool allow_reduced, const v1::Matrix& a, const v1::Matrix* b,
    v1::Matrix* out, v1::ExecutionReport* report) {
  const absl::Time received = absl::Now();
  if (!problem.ok()) return FinishNow(problem.status());
  auto named = ResolveVariant(registry_, config_.backend, *problem, variant_name, "variant");
  if (!named.ok()) return FinishNow(named.status());
  VariantSelector::Choice choice;
  if (*named) {
    choice.variant = *named;
  } else {
    choice = selector_.Choose(*problem, allow_reduced);
  }
  if (choice.variant == nullptr) {
    return FinishNow(absl::InvalidArgumentError(absl::StrCat(
        "variant: no ", kernels::OpName(problem->op), " variant supports ",
        kernels::DTypeName(problem->dtype), " on this server")));
  }

  out->set_dtype(ToProto(problem->dtype));
  out->set_rows(kernels::OutputRows(*problem));
  out->set_cols(kernels::OutputCols(*problem));
  std::string* out_data = out->mutable_data();
  out_data->resize(kernels::OutputElements(*problem) * kernels::ElementSize(problem->dtype));

  ComputeJob job;
  job.problem = *problem;
  job.variant = choice.variant;
  job.a = a.data().data();
  job.b = b ? b->data().data() : nullptr;
  job.out = out_data->data();

  auto* reactor = new CallReactor;
  auto times = std::make_shared<StageTimes>();
  auto ran = std::make_shared<const kernels::Variant*>(choice.variant);
  Task task;
  task.deadline = DeadlineOf(ctx);
  task.cancelled = reactor->cancelled();
  const absl::Time deadline = task.deadline;
  task.run = [this, job, choice, allow_reduced, times, ran, cancelled = task.cancelled,
              deadline](Device& device) mutable {
    const StopRequested stop = [cancelled, deadline] {
      return cancelled->load() || absl::Now() > deadline;
    };
    if (choice.calibrate) {
      // First request of this shape bucket: time every candidate on it once.
      ProfileJob calibration{job.problem, choice.candidates, 1, 3, std::random_device{}()};
      auto measured = device.Measure(calibration, stop);
      if (measured.ok()) {
        selector_.Record(job.problem, *measured);
        if (const kernels::Variant* best = selector_.Select(job.problem, allow_reduced)) {
          job.variant = best;
        }
      } else {
        selector_.AbandonCalibration(job.problem);
      }
    }
    *ran = job.variant;
    auto result = device.Execute(job, stop);
    if (!result.ok()) return result.status();
    *times = *result;
    return absl::OkStatus();
  };
  task.done = [reactor, report, times, received, ran](absl::Status status, Device* device,
                                                      int64_t queue_us) {
    if (status.ok()) {
      report->set_variant((*ran)->name);
      report->set_device(device->description().name);
      report->set_queue_us(queue_us);
      report->set_upload_us(times->upload_us);
      report->set_compute_us(times->compute_us);
      report->set_download_us(times->download_us);
      report->set_total_us(absl::ToInt64Microseconds(absl::Now() - received));
    }
    reactor->Finish(ToGrpcStatus(status));
  };
  scheduler_.Submit(std::move(task));
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::MatMul(grpc::CallbackServerContext* ctx,
                                                 const v1::MatMulRequest* req,
                                                 v1::MatMulResponse* resp) {
  return RunCompute(ctx, ValidateMatMul(*req, config_.limits), req->variant(), req->allow_tf32(),
                    req->a(), &req->b(), resp->mutable_c(), resp->mutable_report());
}

grpc::ServerUnaryReactor* ComputeService::Transpose(grpc::CallbackServerContext* ctx,
                                                    const v1::TransposeRequest* req,
                                                    v1::TransposeResponse* resp) {
  return RunCompute(ctx, ValidateTranspose(*req, config_.limits), req->variant(), false,
                    req->input(), nullptr, resp->mutable_output(), resp->mutable_report());
}

grpc::ServerUnaryReactor* ComputeService::Reduce(grpc::CallbackServerContext* ctx,
                                                 const v1::ReduceRequest* req,
                                                 v1::ReduceResponse* resp) {
  return RunCompute(ctx, ValidateReduce(*req, config_.limits), req->variant(), false,
                    req->input(), nullptr, resp->mutable_output(), resp->mutable_report());
}

grpc::ServerUnaryReactor* ComputeService::Profile(grpc::CallbackServerContext* ctx,
                                                  const v1::ProfileRequest* req,
                                                  v1::ProfileResponse* resp) {
  auto problem = ValidateProfile(*req, config_.limits);
  if (!problem.ok()) return FinishNow(problem.status());
  ProfileJob job;
  job.problem = *problem;
  job.warmup = req->warmup() > 0 ? req->warmup() : config_.profile_warmup;
  job.repetitions = req->repetitions() > 0 ? req->repetitions() : config_.profile_repetitions;
  job.seed = std::random_device{}();
  for (int i = 0; i < req->variants_size(); ++i) {
    auto v = ResolveVariant(registry_, config_.backend, *problem, req->variants(i),
                            absl::StrCat("variants[", i, "]"));
    if (!v.ok()) return FinishNow(v.status());
    if (*v == nullptr) {
      return FinishNow(absl::InvalidArgumentError(absl::StrCat(
          "variants[", i, "]: \"", req->variants(i), "\" is not a variant; list names, or none for all")));
    }
    job.variants.push_back(*v);
  }
  if (job.variants.empty()) {
    for (const kernels::Variant* v : registry_.List(problem->op, config_.backend)) {
      if (v->Supports(problem->dtype)) job.variants.push_back(v);
    }
  }

  auto* reactor = new CallReactor;
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
  task.done = [this, reactor, resp, measured, job](absl::Status status, Device* device, int64_t) {
    if (status.ok()) {
      selector_.Record(job.problem, *measured);
      const kernels::Variant* selected = selector_.Select(job.problem, false);
      FillProfileResponse(job.problem, *measured, device->description(), device->ceilings(),
                          selected ? selected->name : "", resp);
      resp->set_seed(job.seed);
    }
    reactor->Finish(ToGrpcStatus(status));
  };
  scheduler_.Submit(std::move(task));
  return reactor;
}

grpc::ServerUnaryReactor* ComputeService::GetServerInfo(grpc::CallbackServerContext*,
                                                        const v1::ServerInfoRequest*,
                                                        v1::ServerInfo* resp) {
  resp->set_version(config_.version);
  resp->set_backend(kernels::BackendName(config_.backend));
  for (const auto& device : scheduler_.devices()) {
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
  for (const kernels::Variant* v : registry_.List(config_.backend)) {
    v1::VariantInfo* info = resp->add_variants();
    info->set_op(ToProto(v->op));
    info->set_name(v->name);
    info->set_description(v->description);
    for (kernels::DType d : v->dtypes) info->add_dtypes(ToProto(d));
    info->set_reduced_precision(v->reduced_precision);
  }
  resp->set_max_matrix_bytes(config_.limits.max_matrix_bytes);
  return FinishNow(absl::OkStatus());
}

}  // namespace gpucompute::server
