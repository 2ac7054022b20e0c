// matmul, transpose and reduce: one op on the server, its inputs sent inline, as
// tensors or through shared memory.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "op_inputs.h"
#include "op_output.h"

namespace gpucompute::cli {

namespace {

const FlagSpec kOutputDTypeFlag = {
    "output_dtype", "float32", "",
    "the result's dtype: float32 for float16/bfloat16 inputs (accumulated in float32 either way)"};

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

int RunMatMul(const ParsedArgs& args, const Client& client) {
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_MATMUL, client);
  if (!in.ok()) return InputsFailed(in.status());
  std::printf("matmul    a %s (%s) @ b %s (%s)\n", in->matrices[0].Describe().c_str(),
              in->labels[0].c_str(), in->matrices[1].Describe().c_str(), in->labels[1].c_str());
  absl::StatusOr<OpOptions> placement = Placement(args);
  if (!placement.ok()) return UsageError(placement.status());
  absl::StatusOr<std::optional<DType>> output_dtype = OutputDTypeFlag(args);
  if (!output_dtype.ok()) return UsageError(output_dtype.status());
  absl::StatusOr<SharedPlacement> shm =
      PlaceInSharedMemory(args, client, in->matrices, [&](const std::vector<MatrixShape>& s) {
        // a @ b: M x N
        return MatrixShape{output_dtype->value_or(s[0].dtype), s[0].rows, s[1].cols};
      });
  if (!shm.ok()) return CallFailed(shm.status());
  MatMulOptions options;
  options.variant = Variant(args);
  options.allow_tf32 = args.GetBool("allow_tf32");
  options.output_dtype = *output_dtype;
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
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_TRANSPOSE, client);
  if (!in.ok()) return InputsFailed(in.status());
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
  absl::StatusOr<Inputs> in = LoadInputs(args, v1::OP_REDUCE, client);
  if (!in.ok()) return InputsFailed(in.status());
  std::printf("reduce    %s %s of %s (%s)\n", ReduceOpName(*op), ReduceAxisName(*axis),
              in->matrices[0].Describe().c_str(), in->labels[0].c_str());
  absl::StatusOr<OpOptions> options = Placement(args);
  if (!options.ok()) return UsageError(options.status());
  absl::StatusOr<std::optional<DType>> output_dtype = OutputDTypeFlag(args);
  if (!output_dtype.ok()) return UsageError(output_dtype.status());
  options->output_dtype = *output_dtype;
  absl::StatusOr<SharedPlacement> shm =
      PlaceInSharedMemory(args, client, in->matrices, [&](const std::vector<MatrixShape>& s) {
        // all: 1 x 1; per_row: M x 1; per_column: 1 x N.
        return MatrixShape{output_dtype->value_or(s[0].dtype),
                           *axis == v1::REDUCE_AXIS_PER_ROW ? s[0].rows : 1,
                           *axis == v1::REDUCE_AXIS_PER_COLUMN ? s[0].cols : 1};
      });
  if (!shm.ok()) return CallFailed(shm.status());
  options->output = shm->output;
  return SendAndFinish(
      args, in->matrices,
      [&](std::vector<Operand> m) { return client.Reduce(std::move(m[0]), *op, *axis, *options); },
      shm->output);
}

}  // namespace

std::vector<Command> OpCommands() {
  return {
      {"matmul", "multiply two matrices", "[flags] (A.npy B.npy | --random MxKxN)", true,
       "Multiplies a (M x K) by b (K x N) on the server: c = a @ b, M x N.\n"
       "--random MxKxN generates a as MxK from --seed and b as KxN from --seed+1,\n"
       "values uniform in [-1, 1). Example: --random 512x256x128.\n"
       "@ID in place of a file names a tensor held by the server (`gpucompute upload`);\n"
       "--keep holds the result there too and prints its id.\n" +
           std::string(kShmHelp),
       Concat(kInputFlags,
              {{"allow_tf32", "", "", "let the server's automatic choice use TF32 tensor cores"},
               kOutputDTypeFlag}),
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
                            {"axis", "all|per_row|per_column", "all", "what to reduce over"},
                            kOutputDTypeFlag}),
       120000, RunReduce},
  };
}

}  // namespace gpucompute::cli
