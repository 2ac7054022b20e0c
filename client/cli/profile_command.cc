// profile: every kernel variant of one op and shape timed against the roofline.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "command.h"
#include "profile_report.h"

namespace gpucompute::cli {

namespace {

// The ProfileRequest the flags describe.
absl::StatusOr<v1::ProfileRequest> ProfileRequestFromFlags(const ParsedArgs& args) {
  v1::ProfileRequest request;
  absl::StatusOr<v1::Op> op = ParseFlag(args, "op", ParseOp);
  if (!op.ok()) return op.status();
  request.set_op(*op);
  if (!args.Has("shape")) {
    return absl::InvalidArgumentError(absl::StrCat("--shape=", ShapeSyntax(*op), " is required"));
  }
  absl::StatusOr<OpShape> shape = ParseShapeFlag(args, "shape", *op);
  if (!shape.ok()) return shape.status();
  request.set_m(shape->m);
  request.set_n(shape->n);
  request.set_k(shape->k);
  absl::StatusOr<DType> dtype = ParseFlag(args, "dtype", ParseDType);
  if (!dtype.ok()) return dtype.status();
  request.set_dtype(ToProto(*dtype));
  absl::StatusOr<v1::ReduceOp> reduce_op = ParseFlag(args, "reduce_op", ParseReduceOp);
  if (!reduce_op.ok()) return reduce_op.status();
  request.set_reduce_op(*reduce_op);
  absl::StatusOr<v1::ReduceAxis> reduce_axis = ParseFlag(args, "reduce_axis", ParseReduceAxis);
  if (!reduce_axis.ok()) return reduce_axis.status();
  request.set_reduce_axis(*reduce_axis);
  if (args.Has("variants")) {
    for (absl::string_view v : absl::StrSplit(args.Get("variants"), ',', absl::SkipEmpty())) {
      request.add_variants(std::string(v));
    }
  }
  constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();
  absl::StatusOr<int64_t> warmup = ParseInt(args, "warmup", 0, kMaxInt32);
  if (!warmup.ok()) return warmup.status();
  request.set_warmup(static_cast<int32_t>(*warmup));
  absl::StatusOr<int64_t> repetitions = ParseInt(args, "repetitions", 0, kMaxInt32);
  if (!repetitions.ok()) return repetitions.status();
  request.set_repetitions(static_cast<int32_t>(*repetitions));
  request.set_counters(args.GetBool("counters"));
  request.set_warm_cache(args.GetBool("warm_cache"));
  return request;
}

int RunProfile(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<v1::ProfileRequest> request = ProfileRequestFromFlags(args);
  if (!request.ok()) return UsageError(request.status());
  const OpShape shape{.m = request->m(), .n = request->n(), .k = request->k()};
  std::string what = absl::StrCat(OpName(request->op()), " ", ProtoDTypeText(request->dtype()),
                                  "  ", ShapeText(request->op(), shape));
  if (request->op() == v1::OP_MATMUL) {
    absl::StrAppend(&what, " (a ", shape.m, "x", shape.k, " @ b ", shape.k, "x", shape.n,
                    "; m=", shape.m, " k=", shape.k, " n=", shape.n, ")");
  } else if (request->op() == v1::OP_REDUCE) {
    absl::StrAppend(&what, "  ", ReduceOpName(request->reduce_op()), " ",
                    ReduceAxisName(request->reduce_axis()));
  }
  std::printf("profile   %s\n\n", what.c_str());
  std::fflush(stdout);

  absl::StatusOr<v1::ProfileResponse> response = client.Profile(*request);
  if (!response.ok()) return CallFailed(response.status());
  size_t width = std::string("variant").size();
  for (const v1::VariantProfile& v : response->variants())
    width = std::max(width, v.variant().size());
  const int w = static_cast<int>(width);
  std::printf("%-*s  %12s  %10s  %10s  %9s  %12s  %s\n", w, "variant", "median us", "GB/s",
              "GFLOP/s", "roofline", "max rel err", "ok");
  bool any_failed = false;
  for (const v1::VariantProfile& v : response->variants()) {
    if (v.ok()) {
      std::printf("%-*s  %12.1f  %10.1f  %10.1f  %8.1f%%  %12.2e  %s\n", w, v.variant().c_str(),
                  v.median_us(), v.gbytes_per_s(), v.gflops(), 100.0 * v.fraction_of_roofline(),
                  v.max_rel_error(), "yes");
    } else {
      any_failed = true;
      std::printf("%-*s  %12s  %10s  %10s  %9s  %12s  %s\n", w, v.variant().c_str(), "-", "-", "-",
                  "-", "-", "NO");
    }
  }
  if (any_failed) {
    std::printf("\nfailed or skipped:\n");
    for (const v1::VariantProfile& v : response->variants()) {
      if (!v.ok()) std::printf("  %-*s  %s\n", w, v.variant().c_str(), v.error().c_str());
    }
  }
  if (const std::string comparisons = ComparisonsText(*response); !comparisons.empty()) {
    std::printf("\n%s", comparisons.c_str());
  }
  if (const std::string counters = CountersText(*response); !counters.empty()) {
    std::printf("\n%s", counters.c_str());
  }
  if (const std::string notes = NotesText(*response); !notes.empty()) {
    std::printf("\n%s", notes.c_str());
  }
  std::printf("\nselected  %s\n", response->selected().c_str());
  std::printf("seed      %" PRIu64 " (of the server-generated inputs)\n", response->seed());
  std::printf("device    %s\n", response->device().c_str());
  std::printf("caches    %s\n", response->cold_cache()
                                    ? "cold: flushed before each timed run"
                                    : "warm: each timed run follows the previous one");
  std::printf("peaks     %.1f GB/s, %.1f GFLOP/s", response->peak_gbytes_per_s(),
              response->peak_gflops());
  if (response->peak_read_gbytes_per_s() > 0) {
    std::printf(", read-only %.1f GB/s", response->peak_read_gbytes_per_s());
  }
  std::printf("\n");
  if (args.Has("html")) {
    const std::string path = args.Get("html");
    if (absl::Status s = WriteProfileHtml(path, what, *response); !s.ok()) return CallFailed(s);
    std::printf("html      %s\n", path.c_str());
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> ProfileCommands() {
  return {
      {"profile",
       "time every kernel variant against the roofline",
       "--op OP --shape SHAPE [flags]",
       false,
       "Runs every applicable kernel variant (or --variants) on server-generated\n"
       "random data, checks each against a reference and prints the timings,\n"
       "then the comparisons: pairs of variants that differ by one idea (coalescing,\n"
       "bank conflicts, tiling, ...) and the time ratio that idea bought.\n"
       "--shape, as matmul --random and transpose/reduce --random take it:\n"
       "  matmul:            MxKxN  (a is M x K, b is K x N, c is M x N)\n"
       "  transpose, reduce: MxN    (the input is M x N)",
       {{"op", "matmul|transpose|reduce", "matmul", "operation to profile"},
        {"shape", "SHAPE", "", "MxKxN for matmul, MxN otherwise (required)"},
        {"dtype", "float32|float64|float16|bfloat16", "float32", "element type"},
        {"reduce_op", "sum|min|max|mean", "sum", "reduction, for --op reduce"},
        {"reduce_axis", "all|per_row|per_column", "all", "reduction axis, for --op reduce"},
        {"variants", "A,B,...", "", "only these variants (default: all that apply)"},
        {"warmup", "N", "0", "untimed runs per variant (0: server default)"},
        {"repetitions", "N", "0", "timed runs per variant (0: server default)"},
        {"counters", "", "",
         "also read hardware counters per variant (bank conflicts, DRAM bytes, sectors per "
         "request, ...), after the timed runs; where the server cannot, each row's note says "
         "why"},
        {"warm_cache", "", "",
         "time runs with warm caches (default: each timed run starts with the device's "
         "last-level cache, a GPU's L2, flushed)"},
        {"html", "FILE", "",
         "also write the profile as one self-contained HTML page: the ladder as bars, the "
         "comparisons with their lessons, the device and its ceilings"}},
       600000,
       RunProfile},
  };
}

}  // namespace gpucompute::cli
