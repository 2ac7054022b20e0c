// The operands of matmul, transpose and reduce: read from .npy files, named
// as tensors held by the server (@ID) or generated (--random), and with
// --shm copied into a shared-memory region.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flags.h"
#include "gpucompute/client.h"
#include "gpucompute/shared_memory.h"

namespace gpucompute::cli {

// The flags every op takes, before its own.
extern const std::vector<FlagSpec> kInputFlags;

struct Inputs {
  std::vector<Operand> matrices;
  std::vector<std::string> labels;  // "a.npy", "random, seed 1" or "held by the server"
};

// The inputs of `op`: its .npy files (a and b for matmul, one otherwise),
// tensors held by the server as @ID in their place, or --random in the op's
// shape syntax (ShapeSyntax). Large --random inputs are checked against the
// server's max_matrix_bytes before they are built (INVALID_ARGUMENT past it,
// as every error of the command line's; GetServerInfo's own error, whatever
// its code, if the server cannot say).
absl::StatusOr<Inputs> LoadInputs(const ParsedArgs& args, v1::Op op, const Client& client);

// The exit code of a LoadInputs error: a usage error for the command line's
// (INVALID_ARGUMENT: inputs past the server's limit included), a failed call
// for any other (GetServerInfo's).
int InputsFailed(const absl::Status& status);

struct MatrixShape {
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
};

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
    const std::function<MatrixShape(const std::vector<MatrixShape>&)>& result_shape);

}  // namespace gpucompute::cli
