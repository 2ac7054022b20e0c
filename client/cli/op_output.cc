#include "op_output.h"

#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gpucompute/common/time.h"
#include "gpucompute/npy.h"

namespace gpucompute::cli {

namespace {

std::string Micros(int64_t us) { return absl::StrCat(us, " us"); }

}  // namespace

void PrintReport(const v1::ExecutionReport& r, double round_trip_us) {
  std::printf("variant   %s\n", r.variant().c_str());
  std::printf("device    %s\n", r.device().c_str());
  std::printf(
      "time      queue %s | upload %s | compute %s | download %s | total %s"
      " (server); round trip %.0f us (client)\n",
      Micros(r.queue_us()).c_str(), Micros(r.upload_us()).c_str(), Micros(r.compute_us()).c_str(),
      Micros(r.download_us()).c_str(), Micros(r.total_us()).c_str(), round_trip_us);
  if (r.batch_size() > 1)
    std::printf("batch     ran with %d requests as one batch\n", r.batch_size());
}

int FinishOp(const ParsedArgs& args, absl::StatusOr<OpResult> result,
             std::chrono::steady_clock::time_point start,
             const std::optional<SharedMemoryView>& shm_output) {
  const double round_trip_us = common::MicrosSince(start);
  if (!result.ok()) return CallFailed(result.status());
  PrintReport(result->report, round_trip_us);
  if (result->in_shared_memory) {
    if (!shm_output) {
      return CallFailed(absl::InternalError("the server wrote the result into shared memory"));
    }
    absl::StatusOr<Matrix> m =
        Matrix::FromBytes(shm_output->dtype, shm_output->rows, shm_output->cols,
                          std::string(shm_output->data, size_t(shm_output->byte_size())));
    if (!m.ok()) return CallFailed(m.status());
    result->output = std::move(*m);
  }
  if (result->kept()) {
    // Stays on the server past this process: detached, not released.
    Tensor& t = result->tensor;
    std::printf("kept      %s  %" PRId64 "x%" PRId64 " %s\n", t.id().c_str(), t.rows(), t.cols(),
                DTypeName(t.dtype()));
    t.Detach();
    return kExitOk;
  }
  PrintSummary(result->output);
  if (args.Has("out")) {
    if (absl::Status st = WriteNpy(args.Get("out"), result->output); !st.ok()) {
      return CallFailed(st);
    }
    std::printf("wrote     %s\n", args.Get("out").c_str());
  }
  return kExitOk;
}

std::string Variant(const ParsedArgs& args) {
  return args.Get("variant") == "auto" ? "" : args.Get("variant");
}

absl::StatusOr<std::optional<DType>> OutputDTypeFlag(const ParsedArgs& args) {
  if (!args.Has("output_dtype")) return std::nullopt;
  absl::StatusOr<DType> dtype = ParseFlag(args, "output_dtype", ParseDType);
  if (!dtype.ok()) return dtype.status();
  return std::optional<DType>(*dtype);
}

absl::StatusOr<OpOptions> Placement(const ParsedArgs& args) {
  if (args.GetBool("keep") && args.Has("out")) {
    return absl::InvalidArgumentError(
        "--keep holds the result on the server; --out needs it here (download it with "
        "`gpucompute download ID OUT.npy`)");
  }
  OpOptions options;
  options.variant = Variant(args);
  options.keep = args.GetBool("keep");
  absl::StatusOr<int64_t> ttl = ParseInt(args, "ttl", 0);
  if (!ttl.ok()) return ttl.status();
  options.ttl_seconds = *ttl;
  return options;
}

}  // namespace gpucompute::cli
