// What a run keeps on the server (or beside it) from start to end: the
// --placement=tensor operands and the thread releasing kept outputs, the
// --placement=shm region, and the matrix an upload or download row moves.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpucompute/client.h"
#include "gpucompute/matrix.h"
#include "gpucompute/shared_memory.h"
#include "loadtest/load.h"
#include "loadtest/run_options.h"

namespace gpucompute::loadtest {

// Members are destroyed in reverse order: the region and the held tensors go
// (released on the server) before the releaser stops.
struct HeldOperands {
  std::unique_ptr<TensorReleaser> releaser;  // --placement=tensor: kept outputs
  std::vector<Tensor> held;                  // uploaded operands, a download's tensor
  TensorPlacement tensor_placement;
  std::optional<Matrix> transfer_matrix;  // upload and download rows
  std::string download_id;
  std::optional<SharedMemoryRegion> region;  // --placement=shm: a, b and the output
  SharedMemoryPlacement shm_placement;
};

// Uploads, registers and fills what `run` needs through `client` into
// `operands` (left in place, so that the releaser's and the tensors' client
// stays the one given). Errors are the message for the user.
absl::Status HoldOperands(const RunOptions& run, Client& client, HeldOperands& operands);

}  // namespace gpucompute::loadtest
