// gpucompute: command-line client for the gpucompute service.
// Exit codes: 0 ok, 1 the RPC (or writing --out) failed, 2 usage error
// (bad flags, unreadable or malformed input files).

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "flags.h"
#include "gpucompute/client.h"
#include "gpucompute/host_memory.h"
#include "gpucompute/npy.h"
#include "gpucompute/shared_memory.h"
#include "profile_report.h"

namespace gpucompute::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// Ends the command on a usage error (bad flags, unreadable or malformed
// inputs): the message on stderr, exit 2.
int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "gpucompute: %s\n", std::string(status.message()).c_str());
  return kExitUsage;
}

// Ends the command on a failed call: the message on stderr, exit 1.
int CallFailed(const absl::Status& status) {
  std::fprintf(stderr, "gpucompute: %s\n", std::string(status.message()).c_str());
  return kExitFailed;
}

const std::vector<FlagSpec>& ConnectionFlags() {
  static const std::vector<FlagSpec> flags = {
      {"server", "TARGET", "localhost:50051",
       "server address: HOST:PORT, unix:/PATH (a local unix socket) or any gRPC target; "
       "several replicas comma-separated (A:PORT,B:PORT): @ID operands and tensor commands "
       "go to the replica holding the tensor"},
      {"deadline_ms", "MS", "",
       "deadline of the call in milliseconds (default: health 5000, info 10000, "
       "matmul/transpose/reduce 120000, profile, upload and download 600000)"},
      {"tls_ca", "FILE", "", "PEM root CA; turns TLS on"},
      {"tls_cert", "FILE", "", "PEM client certificate for mutual TLS (with --tls_key)"},
      {"tls_key", "FILE", "", "PEM private key of --tls_cert"},
      {"tls_server_name", "NAME", "", "name to check in the server certificate; turns TLS on"},
      {"tls", "", "", "use TLS with the system's root CAs"},
      {"token_file", "FILE", "", "send the file's first line as 'authorization: Bearer <token>'"},
      {"busy_poll", "", "",
       "wait for each answer by polling instead of sleeping (a busy core; less latency, as "
       "--repeat shows)"},
  };
  return flags;
}

struct Command {
  std::string name;
  std::string summary;      // one line for `gpucompute --help`
  std::string synopsis;     // after "gpucompute NAME "
  bool takes_files;         // .npy files as arguments (else no arguments)
  std::string description;  // paragraphs shown by --help
  std::vector<FlagSpec> flags;
  int64_t default_deadline_ms;
  std::function<int(const ParsedArgs&, const Client&)> run;
};

// ---------------------------------------------------------------- parsing --

// A flag's value read by `parse` (one of the library's Parse* functions);
// errors name the flag: "--op: expected sum, min, max or mean, got 'median'".
template <typename Parse>
auto ParseFlag(const ParsedArgs& args, const std::string& flag, Parse parse)
    -> decltype(parse(std::string())) {
  auto value = parse(args.Get(flag));
  if (!value.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", value.status().message()));
  }
  return value;
}

absl::StatusOr<int64_t> ParseInt(const ParsedArgs& args, const std::string& flag, int64_t min,
                                 int64_t max = std::numeric_limits<int64_t>::max()) {
  int64_t v;
  if (!absl::SimpleAtoi(args.Get(flag), &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": expected an integer >= ", min,
        max == std::numeric_limits<int64_t>::max() ? "" : absl::StrCat(" and <= ", max), ", got '",
        args.Get(flag), "'"));
  }
  return v;
}

absl::StatusOr<OpShape> ParseShapeFlag(const ParsedArgs& args, const std::string& flag, v1::Op op) {
  return ParseFlag(args, flag, [op](const std::string& text) { return ParseShape(op, text); });
}

// ----------------------------------------------------------------- inputs --

const std::vector<FlagSpec> kInputFlags = {
    {"random", "SHAPE", "", "generate inputs instead of reading .npy files (shape syntax above)"},
    {"dtype", "float32|float64", "float32", "element type of --random inputs"},
    {"seed", "N", "1", "seed of --random inputs (input i uses seed + i)"},
    {"out", "FILE.npy", "", "write the result matrix to this .npy file"},
    {"variant", "NAME", "auto", "kernel variant (see `gpucompute info`); auto: server chooses"},
    {"repeat", "N", "1",
     "send the request N times over one connection and print each timing (the first also "
     "connects, and with auto may calibrate a new shape)"},
    {"keep", "", "",
     "hold the result on the server and print its tensor id (instead of writing --out)"},
    {"ttl", "SECONDS", "0", "with --keep: the result's idle lifetime (0: the server's default)"},
    {"shm", "", "",
     "pass the inputs and the result through a shared-memory region instead of the socket "
     "(needs a server on the same host started with --allow_shared_memory; see above)"},
};

// The paragraph every op's --help ends with.
constexpr char kShmHelp[] =
    "\n--shm creates one POSIX shared-memory region (in /dev/shm, mode 0600) big\n"
    "enough for the inputs and the result, copies the input matrices into it and\n"
    "sends the op with its operands and output in the region: no matrix bytes on\n"
    "the socket (@ID operands stay on the server; with --keep the result does\n"
    "too). The result is read from the region, then printed and written as\n"
    "without --shm. It needs a server on the same host started with\n"
    "--allow_shared_memory and running as the same user (the region is only\n"
    "this user's); the region is unregistered and removed when the command ends.";

struct Inputs {
  std::vector<Operand> matrices;
  std::vector<std::string> labels;  // "a.npy", "random, seed 1" or "held by the server"
};

// The inputs of `op`: its .npy files (a and b for matmul, one otherwise),
// tensors held by the server as @ID in their place, or --random in the op's
// shape syntax (ShapeSyntax).
absl::StatusOr<Inputs> LoadInputs(const ParsedArgs& args, v1::Op op) {
  const size_t count = op == v1::OP_MATMUL ? 2 : 1;
  Inputs in;
  const bool random = args.Has("random");
  if (random && !args.positional().empty()) {
    return absl::InvalidArgumentError("give either .npy files or --random, not both");
  }
  if (!random) {
    if (args.positional().size() != count) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected ", count, count == 1 ? " .npy file" : " .npy files",
                       " (or @TENSOR_ID) or --random, got ", args.positional().size(), " file(s)"));
    }
    for (const std::string& path : args.positional()) {
      if (path.size() > 1 && path[0] == '@') {  // a tensor held by the server
        in.matrices.push_back(Operand::TensorId(path.substr(1)));
        in.labels.push_back("held by the server");
        continue;
      }
      absl::StatusOr<Matrix> m = ReadNpy(path);
      if (!m.ok()) return absl::InvalidArgumentError(m.status().message());
      if (args.Has("dtype") && args.Get("dtype") != DTypeName(m->dtype())) {
        return absl::InvalidArgumentError(absl::StrCat("--dtype applies to --random inputs only; ",
                                                       path, " is ", DTypeName(m->dtype())));
      }
      in.matrices.push_back(std::move(*m));
      in.labels.push_back(path);
    }
    return in;
  }
  absl::StatusOr<DType> dtype = ParseFlag(args, "dtype", ParseDType);
  if (!dtype.ok()) return dtype.status();
  uint64_t seed;
  if (!absl::SimpleAtoi(args.Get("seed"), &seed)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seed: expected a non-negative integer, got '", args.Get("seed"), "'"));
  }
  absl::StatusOr<OpShape> shape = ParseShapeFlag(args, "random", op);
  if (!shape.ok()) return shape.status();
  // (rows, cols) of each input: a is M x K and b is K x N, or the one M x N.
  const std::vector<std::pair<int64_t, int64_t>> wanted =
      op == v1::OP_MATMUL
          ? std::vector<std::pair<int64_t, int64_t>>{{shape->m, shape->k}, {shape->k, shape->n}}
          : std::vector<std::pair<int64_t, int64_t>>{{shape->m, shape->n}};
  for (size_t i = 0; i < wanted.size(); ++i) {
    absl::StatusOr<Matrix> m = Matrix::Random(*dtype, wanted[i].first, wanted[i].second, seed + i);
    if (!m.ok())
      return absl::InvalidArgumentError(absl::StrCat("--random: ", m.status().message()));
    in.matrices.push_back(std::move(*m));
    in.labels.push_back(absl::StrCat("random, seed ", seed + i));
  }
  return in;
}

// ----------------------------------------------------------------- output --

std::string Micros(int64_t us) { return absl::StrCat(us, " us"); }

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

void PrintSummary(const Matrix& m) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0;
  int64_t non_finite = 0;
  for (int64_t r = 0; r < m.rows(); ++r) {
    for (int64_t c = 0; c < m.cols(); ++c) {
      const double v = m.at(r, c);
      if (!std::isfinite(v)) {
        ++non_finite;
        continue;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
  }
  const int64_t finite = m.elements() - non_finite;
  std::printf("result    %s", m.ShapeString().c_str());
  if (finite > 0) {
    std::printf("  min %.6g  max %.6g  mean %.6g", lo, hi, sum / double(finite));
  }
  if (non_finite > 0) std::printf("  non-finite %" PRId64, non_finite);
  std::printf("\n");
  // Small results are shown whole; they are usually checks by hand.
  if (m.rows() <= 8 && m.cols() <= 8) {
    for (int64_t r = 0; r < m.rows(); ++r) {
      std::printf("          [");
      for (int64_t c = 0; c < m.cols(); ++c) std::printf("%s%12.6g", c ? " " : "", m.at(r, c));
      std::printf("]\n");
    }
  }
}

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

// Prints the result, writes --out, and picks the exit code. A result
// written into shared memory (--shm) is read from `shm_output`.
int FinishOp(const ParsedArgs& args, absl::StatusOr<OpResult> result,
             std::chrono::steady_clock::time_point start,
             const std::optional<SharedMemoryView>& shm_output) {
  const double round_trip_us = MicrosSince(start);
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

// Sends the request --repeat times; every call but the last is sent from a
// copy of the inputs made before its clock starts, so each is timed alike.
// With --keep, the results of the earlier calls are released again.
// With --shm, `shm_output` is the view the result is written into.
template <typename Send>  // Send(std::vector<Operand> inputs) -> absl::StatusOr<OpResult>
int SendAndFinish(const ParsedArgs& args, std::vector<Operand>& inputs, Send send,
                  const std::optional<SharedMemoryView>& shm_output) {
  absl::StatusOr<int64_t> repeat = ParseInt(args, "repeat", 1);
  if (!repeat.ok()) return UsageError(repeat.status());
  for (int64_t i = 1; i < *repeat; ++i) {
    std::vector<Operand> copy = inputs;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<OpResult> result = send(std::move(copy));
    if (!result.ok()) return FinishOp(args, std::move(result), start, shm_output);
    PrintReport(result->report, MicrosSince(start));
  }
  const auto start = std::chrono::steady_clock::now();
  return FinishOp(args, send(std::move(inputs)), start, shm_output);
}

// --keep, --ttl and --out as the ops take them.
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

// ---------------------------------------------------------- shared memory --

struct MatrixShape {
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
};

// An operand's dtype and shape: an inline matrix's own, a tensor's (@ID) as
// the server lists it.
absl::StatusOr<MatrixShape> ShapeOf(const Client& client, const Operand& operand) {
  if (!operand.is_tensor()) {
    const Matrix& m = operand.matrix();
    return MatrixShape{m.dtype(), m.rows(), m.cols()};
  }
  absl::StatusOr<v1::ListTensorsResponse> list = client.ListTensors();
  if (!list.ok()) return list.status();
  for (const v1::TensorInfo& t : list->tensors()) {
    if (t.id() != operand.tensor_id()) continue;
    return MatrixShape{t.dtype() == v1::DTYPE_FLOAT64 ? DType::kFloat64 : DType::kFloat32, t.rows(),
                       t.cols()};
  }
  return absl::NotFoundError(
      absl::StrCat("tensor ", operand.tensor_id(), " is not held by the server"));
}

// What --shm set up: the region (removed when this goes) and, unless --keep,
// the view the result is written into.
struct SharedPlacement {
  std::optional<SharedMemoryRegion> region;
  std::optional<SharedMemoryView> output;
};

// Without --shm, nothing. With it: one region holding the inline inputs and
// the result back to back, each at a 64-byte boundary; the inline inputs are
// copied in and replaced by their views (tensors named by @ID stay where they
// are). `result_shape` gives the result's shape from the inputs' shapes.
absl::StatusOr<SharedPlacement> PlaceInSharedMemory(
    const ParsedArgs& args, const Client& client, std::vector<Operand>& inputs,
    const std::function<MatrixShape(const std::vector<MatrixShape>&)>& result_shape) {
  SharedPlacement placement;
  if (!args.GetBool("shm")) return placement;
  const bool keep = args.GetBool("keep");
  std::vector<MatrixShape> shapes;
  for (const Operand& operand : inputs) {
    // A tensor's shape is needed only to size the result.
    if (operand.is_tensor() && keep) {
      shapes.push_back(MatrixShape{DType::kFloat32, 0, 0});
      continue;
    }
    absl::StatusOr<MatrixShape> shape = ShapeOf(client, operand);
    if (!shape.ok()) return shape.status();
    shapes.push_back(*shape);
  }
  // With --keep the result stays on the server: no room for it here.
  const bool has_result = !keep;
  const MatrixShape result = has_result ? result_shape(shapes) : MatrixShape{};
  constexpr int64_t kAlign = 64;
  auto aligned = [](int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Operand& operand : inputs) {
    offsets.push_back(total);
    if (!operand.is_tensor()) total += aligned(operand.matrix().byte_size());
  }
  const int64_t result_offset = total;
  if (has_result) {
    absl::StatusOr<int64_t> bytes = MatrixByteSize(result.dtype, result.rows, result.cols);
    if (!bytes.ok()) return bytes.status();
    total += *bytes;
  }
  if (total == 0) return placement;  // nothing to place: every input is a tensor, kept result
  absl::StatusOr<SharedMemoryRegion> region = SharedMemoryRegion::Create(client, total);
  if (!region.ok()) {
    return absl::Status(region.status().code(),
                        absl::StrCat(region.status().message(),
                                     " (--shm needs a server on the same host, started with "
                                     "--allow_shared_memory and running as this user)"));
  }
  placement.region.emplace(std::move(*region));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_tensor()) continue;
    const Matrix& m = inputs[i].matrix();
    absl::StatusOr<SharedMemoryView> view =
        placement.region->View(m.dtype(), m.rows(), m.cols(), offsets[i]);
    if (!view.ok()) return view.status();
    if (m.byte_size() > 0) std::memcpy(view->data, m.bytes().data(), size_t(m.byte_size()));
    inputs[i] = *view;
  }
  if (has_result) {
    absl::StatusOr<SharedMemoryView> view =
        placement.region->View(result.dtype, result.rows, result.cols, result_offset);
    if (!view.ok()) return view.status();
    placement.output = *view;
  }
  return placement;
}

// --------------------------------------------------------------- commands --

int RunMatMul(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_MATMUL);
  if (!in.ok()) return UsageError(in.status());
  std::printf("matmul    a %s (%s) @ b %s (%s)\n", in->matrices[0].Describe().c_str(),
              in->labels[0].c_str(), in->matrices[1].Describe().c_str(), in->labels[1].c_str());
  absl::StatusOr<OpOptions> placement = Placement(args);
  if (!placement.ok()) return UsageError(placement.status());
  absl::StatusOr<SharedPlacement> shm =
      PlaceInSharedMemory(args, client, in->matrices, [](const std::vector<MatrixShape>& s) {
        return MatrixShape{s[0].dtype, s[0].rows, s[1].cols};  // a @ b: M x N
      });
  if (!shm.ok()) return CallFailed(shm.status());
  MatMulOptions options;
  options.variant = Variant(args);
  options.allow_tf32 = args.GetBool("allow_tf32");
  options.keep = placement->keep;
  options.ttl_seconds = placement->ttl_seconds;
  options.output = shm->output;
  return SendAndFinish(
      args, in->matrices,
      [&](std::vector<Operand> m) {
        return client.MatMul(std::move(m[0]), std::move(m[1]), options);
      },
      shm->output);
}

int RunTranspose(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_TRANSPOSE);
  if (!in.ok()) return UsageError(in.status());
  std::printf("transpose %s (%s)\n", in->matrices[0].Describe().c_str(), in->labels[0].c_str());
  absl::StatusOr<OpOptions> options = Placement(args);
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<SharedPlacement> shm =
      PlaceInSharedMemory(args, client, in->matrices, [](const std::vector<MatrixShape>& s) {
        return MatrixShape{s[0].dtype, s[0].cols, s[0].rows};
      });
  if (!shm.ok()) return CallFailed(shm.status());
  options->output = shm->output;
  return SendAndFinish(
      args, in->matrices,
      [&](std::vector<Operand> m) { return client.Transpose(std::move(m[0]), *options); },
      shm->output);
}

int RunReduce(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<v1::ReduceOp> op = ParseFlag(args, "op", ParseReduceOp);
  if (!op.ok()) return UsageError(op.status());
  absl::StatusOr<v1::ReduceAxis> axis = ParseFlag(args, "axis", ParseReduceAxis);
  if (!axis.ok()) return UsageError(axis.status());
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_REDUCE);
  if (!in.ok()) return UsageError(in.status());
  std::printf("reduce    %s %s of %s (%s)\n", ReduceOpName(*op), ReduceAxisName(*axis),
              in->matrices[0].Describe().c_str(), in->labels[0].c_str());
  absl::StatusOr<OpOptions> options = Placement(args);
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<SharedPlacement> shm =
      PlaceInSharedMemory(args, client, in->matrices, [&](const std::vector<MatrixShape>& s) {
        // all: 1 x 1; per_row: M x 1; per_column: 1 x N.
        return MatrixShape{s[0].dtype, *axis == v1::REDUCE_AXIS_PER_ROW ? s[0].rows : 1,
                           *axis == v1::REDUCE_AXIS_PER_COLUMN ? s[0].cols : 1};
      });
  if (!shm.ok()) return CallFailed(shm.status());
  options->output = shm->output;
  return SendAndFinish(
      args, in->matrices,
      [&](std::vector<Operand> m) { return client.Reduce(std::move(m[0]), *op, *axis, *options); },
      shm->output);
}

std::string FormatBytes(int64_t bytes) {
  if (bytes >= (1LL << 30)) return absl::StrFormat("%.2f GiB", bytes / double(1LL << 30));
  if (bytes >= (1LL << 20)) return absl::StrFormat("%.2f MiB", bytes / double(1LL << 20));
  return absl::StrCat(bytes, " bytes");
}

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
  const DType dtype = request->dtype() == v1::DTYPE_FLOAT64 ? DType::kFloat64 : DType::kFloat32;
  std::string what = absl::StrCat(OpName(request->op()), " ", DTypeName(dtype), "  ",
                                  ShapeText(request->op(), shape));
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

int RunInfo(const ParsedArgs&, const Client& client) {
  absl::StatusOr<v1::ServerInfo> info = client.GetServerInfo();
  if (!info.ok()) return CallFailed(info.status());
  std::printf("server      %s\n", client.target().c_str());
  std::printf("version     %s\n", info->version().c_str());
  std::printf("backend     %s\n", info->backend().c_str());
  for (int i = 0; i < info->devices_size(); ++i) {
    const v1::DeviceInfo& dev = info->devices(i);
    // DeviceInfo.multiprocessors holds cores on the CPU backend.
    std::printf("%-11s %s  (%s, %d %s)%s\n", i == 0 ? "devices" : "", dev.name().c_str(),
                FormatBytes(dev.memory_bytes()).c_str(), dev.multiprocessors(),
                info->backend() == "cpu" ? "cores" : "SMs",
                dev.healthy() ? "" : "  OUT OF SERVICE");
    std::printf("%-11s   peaks %.1f GB/s, %.1f GFLOP/s fp32, %.1f GFLOP/s fp64\n", "",
                dev.peak_gbytes_per_s(), dev.peak_gflops_fp32(), dev.peak_gflops_fp64());
    if (info->backend() == "cpu") continue;  // no device pool on the CPU backend
    std::printf("%-11s   pool %s reserved, %s in use; %" PRId64 " device mallocs, %" PRId64
                " pool growths, %" PRId64 " pinned host allocs\n",
                "", FormatBytes(dev.pool_reserved_bytes()).c_str(),
                FormatBytes(dev.pool_used_bytes()).c_str(), dev.device_malloc_calls(),
                dev.pool_growths(), dev.host_alloc_calls());
  }
  std::printf("max matrix  %s (%" PRId64 " bytes)\n", FormatBytes(info->max_matrix_bytes()).c_str(),
              info->max_matrix_bytes());
  if (info->max_batch_size() > 1) {
    std::printf("batching    up to %d small requests, waiting %d us for company\n",
                info->max_batch_size(), info->batch_delay_us());
  } else if (info->max_batch_size() == 1) {
    std::printf("batching    off\n");
  }
  size_t width = 0;
  for (const v1::VariantInfo& v : info->variants()) width = std::max(width, v.name().size());
  const int w = static_cast<int>(width);
  for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
    std::printf("\n%s variants:\n", OpName(op));
    for (const v1::VariantInfo& v : info->variants()) {
      if (v.op() != op) continue;
      std::vector<std::string> dtypes;
      for (int t : v.dtypes()) {
        dtypes.push_back(t == v1::DTYPE_FLOAT32   ? "f32"
                         : t == v1::DTYPE_FLOAT64 ? "f64"
                                                  : absl::StrCat("dtype", t));
      }
      std::printf("  %-*s  %-7s  %-4s  %s\n", w, v.name().c_str(),
                  absl::StrJoin(dtypes, ",").c_str(), v.reduced_precision() ? "tf32" : "",
                  v.description().c_str());
    }
  }
  return kExitOk;
}

std::string FormatExpiry(int64_t expires_unix_ms) {
  if (expires_unix_ms <= 0) return "-";
  const int64_t left_s = (expires_unix_ms - absl::ToUnixMillis(absl::Now())) / 1000;
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(expires_unix_ms),
                                       absl::UTCTimeZone()),
                      " (in ", std::max<int64_t>(left_s, 0), " s)");
}

void PrintTensorInfo(const v1::TensorInfo& info) {
  const DType dtype = info.dtype() == v1::DTYPE_FLOAT64 ? DType::kFloat64 : DType::kFloat32;
  std::printf("id        %s\n", info.id().c_str());
  std::printf("shape     %" PRId64 "x%" PRId64 " %s (%s)\n", info.rows(), info.cols(),
              DTypeName(dtype), FormatBytes(info.bytes()).c_str());
  std::printf("device    %s\n", info.device().c_str());
  std::printf("server    %s\n", info.server().c_str());
  std::printf("expires   %s\n", FormatExpiry(info.expires_unix_ms()).c_str());
}

int RunUpload(const ParsedArgs& args, const Client& client) {
  if (args.positional().size() != 1) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("expected one .npy file, got ", args.positional().size())));
  }
  absl::StatusOr<int64_t> ttl = ParseInt(args, "ttl", 0);
  if (!ttl.ok()) return UsageError(ttl.status());
  absl::StatusOr<int64_t> chunk = ParseInt(args, "chunk_bytes", 1);
  if (!chunk.ok()) return UsageError(chunk.status());
  absl::StatusOr<Matrix> m = ReadNpy(args.positional()[0]);
  if (!m.ok()) return UsageError(m.status());
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Tensor> tensor =
      client.Upload(*m, UploadOptions{.ttl_seconds = *ttl, .chunk_bytes = *chunk});
  const double us = MicrosSince(start);
  if (!tensor.ok()) return CallFailed(tensor.status());
  PrintTensorInfo(tensor->info());
  std::printf("upload    %.0f us (%.1f MB/s)\n", us, m->byte_size() / std::max(us, 1.0));
  tensor->Detach();  // held until released or expired
  return kExitOk;
}

int RunDownload(const ParsedArgs& args, const Client& client) {
  if (args.positional().size() != 2) {
    return UsageError(absl::InvalidArgumentError(
        absl::StrCat("expected a tensor id and an output .npy file, got ", args.positional().size(),
                     " argument(s)")));
  }
  std::string id = args.positional()[0];
  if (id.size() > 1 && id[0] == '@') id = id.substr(1);
  absl::StatusOr<int64_t> chunk = ParseInt(args, "chunk_bytes", 0);
  if (!chunk.ok()) return UsageError(chunk.status());
  v1::TensorInfo info;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Matrix> m = client.Download(id, *chunk, args.GetBool("release"), &info);
  const double us = MicrosSince(start);
  if (!m.ok()) return CallFailed(m.status());
  PrintTensorInfo(info);
  std::printf("download  %.0f us (%.1f MB/s)%s\n", us, m->byte_size() / std::max(us, 1.0),
              args.GetBool("release") ? "; released" : "");
  PrintSummary(*m);
  if (absl::Status st = WriteNpy(args.positional()[1], *m); !st.ok()) return CallFailed(st);
  std::printf("wrote     %s\n", args.positional()[1].c_str());
  return kExitOk;
}

int RunTensors(const ParsedArgs&, const Client& client) {
  absl::StatusOr<v1::ListTensorsResponse> list = client.ListTensors();
  if (!list.ok()) return CallFailed(list.status());
  size_t width = 2;
  for (const v1::TensorInfo& t : list->tensors()) width = std::max(width, t.id().size());
  const int w = static_cast<int>(width);
  std::printf("%-*s  %-22s  %12s  %-12s  %s\n", w, "id", "shape", "bytes", "device", "expires");
  for (const v1::TensorInfo& t : list->tensors()) {
    const DType dtype = t.dtype() == v1::DTYPE_FLOAT64 ? DType::kFloat64 : DType::kFloat32;
    std::printf("%-*s  %-22s  %12" PRId64 "  %-12s  %s\n", w, t.id().c_str(),
                absl::StrCat(t.rows(), "x", t.cols(), " ", DTypeName(dtype)).c_str(), t.bytes(),
                t.device().c_str(), FormatExpiry(t.expires_unix_ms()).c_str());
  }
  std::printf("%d tensor%s, %s held of %s\n", list->tensors_size(),
              list->tensors_size() == 1 ? "" : "s", FormatBytes(list->held_bytes()).c_str(),
              FormatBytes(list->limit_bytes()).c_str());
  return kExitOk;
}

int RunRelease(const ParsedArgs& args, const Client& client) {
  if (args.positional().empty()) {
    return UsageError(absl::InvalidArgumentError("expected one or more tensor ids"));
  }
  std::vector<std::string> ids;
  for (const std::string& id : args.positional()) {
    ids.push_back(id.size() > 1 && id[0] == '@' ? id.substr(1) : id);
  }
  absl::StatusOr<v1::ReleaseTensorsResponse> r = client.Release(ids);
  if (!r.ok()) return CallFailed(r.status());
  std::printf("released  %" PRId64 " of %zu (%s freed)\n", r->released(), ids.size(),
              FormatBytes(r->bytes_freed()).c_str());
  // Ids the server did not hold (unknown, expired) are not an error of the
  // call, but a script should notice.
  return r->released() == static_cast<int64_t>(ids.size()) ? kExitOk : kExitFailed;
}

int RunHealth(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<HealthStatus> status = client.Health(args.Get("service"));
  if (!status.ok()) return CallFailed(status.status());
  std::printf("%s\n", HealthStatusName(*status));
  return *status == HealthStatus::kServing ? kExitOk : kExitFailed;
}

std::vector<FlagSpec> Concat(std::vector<FlagSpec> a, const std::vector<FlagSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"matmul", "multiply two matrices", "[flags] (A.npy B.npy | --random MxKxN)", true,
       "Multiplies a (M x K) by b (K x N) on the server: c = a @ b, M x N.\n"
       "--random MxKxN generates a as MxK from --seed and b as KxN from --seed+1,\n"
       "values uniform in [-1, 1). Example: --random 512x256x128.\n"
       "@ID in place of a file names a tensor held by the server (`gpucompute upload`);\n"
       "--keep holds the result there too and prints its id.\n" +
           std::string(kShmHelp),
       Concat(kInputFlags,
              {{"allow_tf32", "", "", "let the server's automatic choice use TF32 tensor cores"}}),
       120000, RunMatMul},
      {"transpose", "transpose a matrix", "[flags] (INPUT.npy | --random MxN)", true,
       "Transposes an M x N matrix on the server; the result is N x M.\n"
       "@ID in place of the file names a tensor held by the server; --keep holds\n"
       "the result there and prints its id.\n" +
           std::string(kShmHelp),
       kInputFlags, 120000, RunTranspose},
      {"reduce", "sum, min, max or mean over all, per row or per column",
       "[flags] (INPUT.npy | --random MxN)", true,
       "Reduces an M x N matrix on the server. --axis all gives 1 x 1, per_row gives\n"
       "M x 1 (numpy x.sum(axis=1)), per_column gives 1 x N (numpy x.sum(axis=0)).\n"
       "@ID in place of the file names a tensor held by the server; --keep holds\n"
       "the result there and prints its id.\n" +
           std::string(kShmHelp),
       Concat(kInputFlags, {{"op", "sum|min|max|mean", "sum", "reduction"},
                            {"axis", "all|per_row|per_column", "all", "what to reduce over"}}),
       120000, RunReduce},
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
        {"dtype", "float32|float64", "float32", "element type"},
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
      {"upload",
       "hold a matrix on the server; prints its tensor id",
       "[flags] FILE.npy",
       true,
       "Streams the .npy file's matrix to the server in messages of --chunk_bytes\n"
       "(any size the server's tensor budget admits) and prints the tensor's id.\n"
       "Name it as @ID in place of an operand file of matmul, transpose or reduce;\n"
       "it stays until `gpucompute release ID` or --ttl seconds without use.",
       {{"ttl", "SECONDS", "0", "idle lifetime (0: the server's --tensor_ttl)"},
        {"chunk_bytes", "N", "4194304", "bytes per stream message"}},
       600000,
       RunUpload},
      {"download",
       "write a tensor held by the server to a .npy file",
       "[flags] ID OUT.npy",
       true,
       "Streams tensor ID from the server and writes it to OUT.npy.",
       {{"release", "", "", "release the tensor once it has been sent"},
        {"chunk_bytes", "N", "0", "bytes per stream message (0: the server's default)"}},
       600000,
       RunDownload},
      {"tensors",
       "list the tensors held by the server",
       "[flags]",
       false,
       "Lists the tensors the server holds, with their shapes, devices and idle\n"
       "deadlines, and the bytes held against the tensor budget.",
       {},
       10000,
       RunTensors},
      {"release",
       "release tensors held by the server",
       "[flags] ID...",
       true,
       "Releases the tensors by id. Exits 1 when some id was not held (unknown,\n"
       "released or expired).",
       {},
       10000,
       RunRelease},
      {"info",
       "server version, devices and kernel variants",
       "[flags]",
       false,
       "Prints the server's version, backend, devices, largest accepted matrix and\n"
       "the kernel variants of each operation.",
       {},
       10000,
       RunInfo},
      {"health",
       "health check; exit 0 when SERVING",
       "[flags]",
       false,
       "Asks grpc.health.v1.Health/Check. Prints the status; exits 0 when SERVING\n"
       "and 1 otherwise (for container health checks).",
       {{"service", "NAME", "", "service to ask about (default: the whole server)"}},
       5000,
       RunHealth},
  };
  return commands;
}

void PrintTopUsage(std::FILE* out) {
  std::fprintf(out,
               "gpucompute: client for the gpucompute GPU matrix service\n\n"
               "usage: gpucompute COMMAND [flags] [args]\n\ncommands:\n");
  for (const Command& c : Commands()) {
    std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  }
  std::fprintf(out,
               "\n`gpucompute COMMAND --help` lists a command's flags.\n"
               "Inputs and --out are NumPy .npy files (float32 '<f4' or float64 '<f8',\n"
               "C order, 1-D read as 1 x N, or 2-D); @ID in place of an input names a\n"
               "tensor held by the server (see upload).\n"
               "Exit codes: 0 ok; 1 the call failed (gRPC code and message on stderr) or\n"
               "--out could not be written; 2 usage error, including unreadable inputs.\n");
}

void PrintCommandUsage(const Command& c) {
  std::printf("usage: gpucompute %s %s\n\n%s\n\nflags:\n%s\nconnection flags:\n%s", c.name.c_str(),
              c.synopsis.c_str(), c.description.c_str(), FormatFlagHelp(c.flags).c_str(),
              FormatFlagHelp(ConnectionFlags()).c_str());
}

absl::StatusOr<ClientOptions> MakeClientOptions(const ParsedArgs& args,
                                                int64_t default_deadline_ms) {
  ClientOptions options;
  options.target = args.Get("server");
  // Replicas, comma-separated; ipv4:/ipv6: targets use commas themselves.
  if (options.target.find(',') != std::string::npos && options.target.rfind("ipv4:", 0) != 0 &&
      options.target.rfind("ipv6:", 0) != 0) {
    options.targets = absl::StrSplit(options.target, ',', absl::SkipEmpty());
  }
  int64_t deadline_ms = default_deadline_ms;
  if (args.Has("deadline_ms")) {
    absl::StatusOr<int64_t> v = ParseInt(args, "deadline_ms", 1);
    if (!v.ok()) return v.status();
    deadline_ms = *v;
  }
  options.deadline = absl::Milliseconds(deadline_ms);
  options.use_tls = args.GetBool("tls");
  options.tls_root_ca_file = args.Get("tls_ca");
  options.tls_cert_file = args.Get("tls_cert");
  options.tls_key_file = args.Get("tls_key");
  options.tls_server_name = args.Get("tls_server_name");
  options.bearer_token_file = args.Get("token_file");
  options.busy_poll = args.GetBool("busy_poll");
  return options;
}

int Main(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  if (words.empty()) {
    PrintTopUsage(stderr);
    return kExitUsage;
  }
  std::string name = words[0];
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && words.size() > 1) {
      name = words[1];
      words = {name, "--help"};
    } else {
      PrintTopUsage(stdout);
      return kExitOk;
    }
  }
  const Command* command = nullptr;
  for (const Command& c : Commands()) {
    if (c.name == name) command = &c;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "gpucompute: unknown command '%s'\n\n", name.c_str());
    PrintTopUsage(stderr);
    return kExitUsage;
  }
  absl::StatusOr<ParsedArgs> args =
      ParsedArgs::Parse(std::vector<std::string>(words.begin() + 1, words.end()),
                        Concat(command->flags, ConnectionFlags()));
  if (!args.ok()) {
    std::fprintf(stderr, "gpucompute %s: %s (see gpucompute %s --help)\n", name.c_str(),
                 std::string(args.status().message()).c_str(), name.c_str());
    return kExitUsage;
  }
  if (args->help()) {
    PrintCommandUsage(*command);
    return kExitOk;
  }
  if (!command->takes_files && !args->positional().empty()) {
    std::fprintf(stderr, "gpucompute %s: unexpected argument '%s' (see gpucompute %s --help)\n",
                 name.c_str(), args->positional()[0].c_str(), name.c_str());
    return kExitUsage;
  }
  absl::StatusOr<ClientOptions> options = MakeClientOptions(*args, command->default_deadline_ms);
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<Client> client = Client::Create(*options);
  if (!client.ok()) return UsageError(client.status());
  return command->run(*args, *client);
}

}  // namespace
}  // namespace gpucompute::cli

int main(int argc, char** argv) {
  gpucompute::RetainLargeHostAllocations();  // --repeat reuses the result's pages
  return gpucompute::cli::Main(argc, argv);
}
