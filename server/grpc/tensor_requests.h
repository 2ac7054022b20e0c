// The tensor side of requests: a Matrix that names a tensor, an output
// placement, an Upload's first message, and TensorInfo on the wire. Pure
// checks and conversions with the messages docs/contract.md's status table
// asks for; the store does the lookups.
#pragma once

#include <optional>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gpucompute/v1/compute.pb.h"
#include "server/engine/shared_memory.h"
#include "server/engine/tensor_store.h"
#include "server/grpc/validate.h"
#include "wire/compute_wire.h"

namespace gpucompute::server {

// FAILED_PRECONDITION naming `field` and --allow_shared_memory: shared
// memory asked of a server running without it.
absl::Status SharedMemoryOff(const std::string& field);

// `slice` (the request's field `field`) looked up in `regions` (null: the
// server runs without shared memory, FAILED_PRECONDITION): NOT_FOUND for an
// unknown region, INVALID_ARGUMENT naming the numbers when its byte_size is
// not `want_bytes` or it lies outside its region.
absl::StatusOr<RegionSlice> ResolveSlice(const wire::SharedMemorySlice& slice, int64_t want_bytes,
                                         const std::string& field,
                                         const SharedMemoryRegistry* regions);
// The same for a slice in a protobuf message (Upload, Download).
absl::StatusOr<RegionSlice> ResolveSlice(const v1::SharedMemorySlice& slice, int64_t want_bytes,
                                         const std::string& field,
                                         const SharedMemoryRegistry* regions);

// One input of a compute request: its shape for validation and, when it
// names a tensor, the tensor (its lifetime renewed), or, when it lies in
// shared memory, the region's slice.
struct Operand {
  MatrixShape shape;
  std::shared_ptr<Tensor> tensor;
  std::optional<RegionSlice> slice;
};

// `m` as an operand named `name` ("a", "b", "input"). A tensor_id is looked
// up in `store` (NOT_FOUND when it is not held); the Matrix's dtype, rows
// and cols must then be 0 (the tensor's own) or equal the tensor's
// (INVALID_ARGUMENT otherwise). A shared_memory payload is looked up in
// `regions` (see ResolveSlice). Inline data passes as it came.
absl::StatusOr<Operand> ResolveOperand(const wire::Matrix& m, const std::string& name,
                                       TensorStore* store, const SharedMemoryRegistry* regions);

// Where the result goes: keep (with its lifetime), a shared-memory slice
// (checked against the result's size once it is known), or return it.
struct Placement {
  bool keep = false;
  absl::Duration ttl;  // zero: the store's default
  std::optional<wire::SharedMemorySlice> shared_memory;
};
absl::StatusOr<Placement> ResolvePlacement(const wire::ComputeRequest& r, TensorStore* store,
                                           const SharedMemoryRegistry* regions);

// An idle lifetime in seconds from a request: 0 = the default (zero
// duration); negative, or longer than the store's --max_tensor_ttl, is
// INVALID_ARGUMENT naming `field`. Without a store (tensors off) any
// length passes: the caller refuses the tensor itself.
absl::StatusOr<absl::Duration> TtlOf(int64_t seconds, const std::string& field,
                                     const TensorStore* store);

// The tensor an Upload's first message describes (dtype, rows, cols;
// INVALID_ARGUMENT naming the field and the numbers otherwise).
absl::StatusOr<TensorShape> UploadShape(const wire::UploadRequest& first);

void ToProto(const TensorInfo& info, v1::TensorInfo* out);

}  // namespace gpucompute::server
