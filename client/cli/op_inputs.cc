#include "op_inputs.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "command.h"
#include "gpucompute/npy.h"

namespace gpucompute::cli {

const std::vector<FlagSpec> kInputFlags = {
    {"random", "SHAPE", "", "generate inputs instead of reading .npy files (shape syntax above)"},
    {"dtype", "float32|float64|float16|bfloat16", "float32", "element type of --random inputs"},
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

namespace {

// Inputs this large take seconds to generate and hold gigabytes: they are
// first checked against the server's limit, at the cost of one call.
// Smaller ones go without asking (the server refuses them itself).
constexpr int64_t kAskTheLimitAboveBytes = int64_t{64} << 20;

// Whether a `rows` x `cols` --random input (input `name`) is within what
// the server takes, asking it only for a large one.
absl::Status RandomInputFits(const Client& client, const char* name, DType dtype, int64_t rows,
                             int64_t cols, std::optional<int64_t>& server_limit) {
  absl::StatusOr<int64_t> bytes = MatrixByteSize(dtype, rows, cols);
  if (!bytes.ok())
    return absl::InvalidArgumentError(absl::StrCat("--random: ", bytes.status().message()));
  if (*bytes <= kAskTheLimitAboveBytes) return absl::OkStatus();
  if (!server_limit) {
    absl::StatusOr<v1::ServerInfo> info = client.GetServerInfo();
    if (!info.ok()) return info.status();
    server_limit = info->max_matrix_bytes();
  }
  // A server that names no limit (0) is left to answer for itself.
  if (*server_limit <= 0 || *bytes <= *server_limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--random: ", name, " would be ", rows, "x", cols, " ", DTypeName(dtype), ", ", *bytes,
      " bytes, more than the server's max_matrix_bytes (", *server_limit, "); nothing was sent"));
}

}  // namespace

int InputsFailed(const absl::Status& status) {
  // Inputs the server would refuse are the command line's error too, as the
  // load test's shapes are; any code from a call (GetServerInfo's) is a
  // failed call, RESOURCE_EXHAUSTED included.
  return status.code() == absl::StatusCode::kInvalidArgument ? UsageError(status)
                                                             : CallFailed(status);
}

absl::StatusOr<Inputs> LoadInputs(const ParsedArgs& args, v1::Op op, const Client& client) {
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
  std::optional<int64_t> server_limit;  // asked once, if at all
  for (size_t i = 0; i < wanted.size(); ++i) {
    const char* name = wanted.size() == 1 ? "the input" : i == 0 ? "a" : "b";
    if (absl::Status s =
            RandomInputFits(client, name, *dtype, wanted[i].first, wanted[i].second, server_limit);
        !s.ok()) {
      return s;
    }
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    absl::StatusOr<Matrix> m = Matrix::Random(*dtype, wanted[i].first, wanted[i].second, seed + i);
    if (!m.ok())
      return absl::InvalidArgumentError(absl::StrCat("--random: ", m.status().message()));
    in.matrices.push_back(std::move(*m));
    in.labels.push_back(absl::StrCat("random, seed ", seed + i));
  }
  return in;
}

namespace {

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
    absl::StatusOr<DType> dtype = DTypeFromProto(t.dtype(), absl::StrCat("tensor ", t.id()));
    if (!dtype.ok()) return dtype.status();
    return MatrixShape{*dtype, t.rows(), t.cols()};
  }
  return absl::NotFoundError(
      absl::StrCat("tensor ", operand.tensor_id(), " is not held by the server"));
}

}  // namespace

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

}  // namespace gpucompute::cli
