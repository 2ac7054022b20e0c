// How one request uses a GPU: where each input's bytes come from (the
// request's host pieces, a tensor on this device read in place, or a tensor
// on another GPU copied peer to peer) and the device bytes it needs of its
// own. CudaDevice runs a plan that fits a slot's scratch as a small request
// and any other as a large one.
#pragma once

#include <cstdint>

#include "server/cuda/device_memory.h"
#include "server/cuda/resident_memory.h"
#include "server/engine/device.h"

namespace gpucompute::server::cuda {

// Where an input's bytes come from: the request (host pieces, uploaded), a
// tensor on this device (read in place), or a tensor on another GPU (copied
// peer to peer into the request's memory).
enum class Source { kAbsent, kHost, kResident, kPeer };

struct Input {
  Source source = Source::kAbsent;
  const HostPieces* host = nullptr;
  bool pinned = false;  // host pieces in registered memory: DMA, no staging
  const CudaResidentMemory* resident = nullptr;
  int64_t bytes = 0;
  // Bytes of request memory it needs: none when read in place.
  int64_t buffer_bytes() const {
    return source == Source::kHost || source == Source::kPeer ? bytes : 0;
  }
};

// The input of `bytes` a job names by its host pieces or resident memory.
Input InputOf(const HostPieces& host, bool pinned, const ResidentMemory* resident, int64_t bytes,
              int ordinal);

// One request's inputs and the device bytes it needs of its own: buffers
// for what is not already resident, and the variant's workspace.
struct RequestPlan {
  Input a, b;
  int64_t out = 0;  // result bytes
  bool out_resident = false;
  bool out_pinned = false;
  int64_t workspace = 0;
  bool workspace_in_slot = false;  // the slot's own (Slot::kWorkspaceBytes)
  int64_t out_buffer() const { return out_resident ? 0 : out; }
  int64_t Total() const {
    return AlignedBytes(a.buffer_bytes()) + AlignedBytes(b.buffer_bytes()) +
           AlignedBytes(out_buffer()) + (workspace_in_slot ? 0 : AlignedBytes(workspace));
  }
  bool uploads() const { return a.buffer_bytes() > 0 || b.buffer_bytes() > 0; }
  bool peer() const { return a.source == Source::kPeer || b.source == Source::kPeer; }
  bool pinned() const { return a.pinned || b.pinned || out_pinned; }
};

// The plan of `job` on the GPU numbered `ordinal`.
RequestPlan PlanOf(const ComputeJob& job, int ordinal);

// Whether CudaDevice::Execute serves the plan as a small request: its own
// buffers fit a slot's scratch, and nothing comes from another GPU or
// through pinned host memory.
bool ServedAsSmall(const RequestPlan& plan);

}  // namespace gpucompute::server::cuda
