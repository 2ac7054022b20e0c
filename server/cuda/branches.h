// Side streams that a captured small batch fans its members out over, so
// that its CUDA graph holds them as parallel branches: the GPU runs the
// members side by side (a 64^3 MatMul fills 16 of an H200's 132 SMs) where
// members captured on one stream would run one after another. Only graph
// capture uses them; a replay runs on the stream the graph is launched on.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "server/cuda/cuda_handles.h"

namespace gpucompute::server::cuda {

class Branches {
 public:
  // At most `count` branches (1 or less: none, members stay on the origin
  // stream). Nothing is created until the first Prepare.
  explicit Branches(int count) : count_(count) {}

  // Creates the streams and events on the current device, once; must be
  // called outside a capture. Fails (and FanOut stays on the origin stream)
  // when they cannot be made.
  absl::Status Prepare();

  // The most branches a batch may take (the flag's value).
  int count() const { return count_; }

  // How many branches FanOut uses for `members`, at most `limit`: member j
  // runs on branch j % Used(members, limit), so the members of one branch
  // run in turn and may share that branch's scratch. 1 before Prepare.
  int Used(int members, int limit) const;

  // Queues `launch(member, branch, stream)` for every member: on the origin
  // stream when Used(members, limit) is 1, else each on its branch's stream
  // after what `origin` queued before, and `origin` waits for every branch
  // after them. Every branch rejoins `origin` even when a launch fails (a capture
  // ends only with its streams joined); the first error is returned and no
  // member is launched after it.
  absl::Status FanOut(
      cudaStream_t origin, int members, int limit,
      const std::function<absl::Status(int member, int branch, cudaStream_t stream)>& launch);

 private:
  const int count_;
  std::vector<UniqueStream> streams_;  // empty until Prepare
  UniqueEvent fork_;
  std::vector<UniqueEvent> joins_;
};

}  // namespace gpucompute::server::cuda
