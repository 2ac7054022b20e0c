#include "server/grpc/tensor_requests.h"

#include "absl/strings/str_cat.h"
#include "server/grpc/convert.h"

namespace gpucompute::server {
namespace {

// A Matrix field given beside a tensor_id: 0 takes the tensor's own value.
absl::Status CheckSame(int64_t given, int64_t held, const std::string& field,
                       const std::string& what, const Tensor& t) {
  if (given == 0 || given == held) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, " given, but tensor ", t.id(),
                                                 " is ", t.shape().rows, " x ", t.shape().cols, " ",
                                                 ProtoDTypeName(ToProto(t.shape().dtype)),
                                                 " (0 takes the tensor's own)"));
}

absl::Status NoTensors(const std::string& field) {
  return absl::FailedPreconditionError(
      absl::StrCat(field, ": this server holds no tensors (its tensor budget is 0)"));
}

}  // namespace

absl::Status SharedMemoryOff(const std::string& field) {
  return absl::FailedPreconditionError(absl::StrCat(
      field, ": shared memory needs --allow_shared_memory (this server runs without it)"));
}

absl::StatusOr<RegionSlice> ResolveSlice(const wire::SharedMemorySlice& slice, int64_t want_bytes,
                                         const std::string& field,
                                         const SharedMemoryRegistry* regions) {
  if (regions == nullptr) return SharedMemoryOff(field);
  if (slice.byte_size != want_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".byte_size: the matrix is ", want_bytes,
                                                   " bytes, got ", slice.byte_size));
  }
  auto region = regions->Find(slice.region, field + ".region");
  if (!region.ok()) return region.status();
  if (auto s = (*region)->CheckSlice(slice.offset, slice.byte_size, field); !s.ok()) return s;
  return RegionSlice{std::move(*region), slice.offset, slice.byte_size};
}

absl::StatusOr<RegionSlice> ResolveSlice(const v1::SharedMemorySlice& slice, int64_t want_bytes,
                                         const std::string& field,
                                         const SharedMemoryRegistry* regions) {
  return ResolveSlice(wire::SharedMemorySlice{slice.region(), slice.offset(), slice.byte_size()},
                      want_bytes, field, regions);
}

absl::StatusOr<Operand> ResolveOperand(const wire::Matrix& m, const std::string& name,
                                       TensorStore* store, const SharedMemoryRegistry* regions) {
  using Payload = wire::Matrix::Payload;
  Operand op;
  switch (m.payload) {
    case Payload::kSharedMemory: {
      const std::string field = name + ".shared_memory";
      if (regions == nullptr) return SharedMemoryOff(field);
      op.shape = MatrixShape{m.dtype, m.rows, m.cols, m.shared_memory.byte_size};
      // A shape with no size (bad dtype, a dimension < 1, an overflow) fails
      // validation, which names the field; the slice is looked at after.
      const int64_t want = MatrixBytes(m.rows, m.cols, m.dtype);
      if (want <= 0 || m.rows < 1 || m.cols < 1) return op;
      auto slice = ResolveSlice(m.shared_memory, want, field, regions);
      if (!slice.ok()) return slice.status();
      op.slice = std::move(*slice);
      return op;
    }
    case Payload::kTensorId: {
      if (store == nullptr) return NoTensors(name + ".tensor_id");
      auto tensor = store->Use(m.tensor_id, name + ".tensor_id");
      if (!tensor.ok()) return tensor.status();
      const Tensor& t = **tensor;
      const int dtype = ToProto(t.shape().dtype);
      if (auto s = CheckSame(m.dtype, dtype, name + ".dtype", ProtoDTypeName(m.dtype), t);
          !s.ok()) {
        return s;
      }
      if (auto s =
              CheckSame(m.rows, t.shape().rows, name + ".rows", absl::StrCat(m.rows, " rows"), t);
          !s.ok()) {
        return s;
      }
      if (auto s =
              CheckSame(m.cols, t.shape().cols, name + ".cols", absl::StrCat(m.cols, " cols"), t);
          !s.ok()) {
        return s;
      }
      op.shape = MatrixShape{dtype, t.shape().rows, t.shape().cols, t.bytes(), true};
      op.tensor = std::move(*tensor);
      return op;
    }
    case Payload::kNone:
    case Payload::kData: break;
  }
  op.shape = MatrixShape{m.dtype, m.rows, m.cols, m.data_bytes};
  return op;
}

absl::StatusOr<absl::Duration> TtlOf(int64_t seconds, const std::string& field,
                                     const TensorStore* store) {
  const absl::Duration max = store != nullptr ? store->max_ttl() : absl::InfiniteDuration();
  if (seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be >= 0 (0: the server's default), got ", seconds));
  }
  if (absl::Seconds(seconds) > max) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", absl::ToInt64Seconds(max),
                                                   " (--max_tensor_ttl), got ", seconds));
  }
  return absl::Seconds(seconds);
}

absl::StatusOr<Placement> ResolvePlacement(const wire::ComputeRequest& r, TensorStore* store,
                                           const SharedMemoryRegistry* regions) {
  Placement placement;
  if (!r.has_output) return placement;
  const wire::OutputPlacement& out = r.output;
  if (out.keep && out.has_shared_memory) {
    return absl::InvalidArgumentError(
        "output: keep and shared_memory both set; a result goes to one place");
  }
  if (out.has_shared_memory) {
    if (regions == nullptr) return SharedMemoryOff("output.shared_memory");
    placement.shared_memory = out.shared_memory;
    return placement;
  }
  auto ttl = TtlOf(out.ttl_seconds, "output.ttl_seconds", store);
  if (!ttl.ok()) return ttl.status();
  if (out.keep && store == nullptr) return NoTensors("output.keep");
  placement.keep = out.keep;
  placement.ttl = *ttl;
  return placement;
}

absl::StatusOr<TensorShape> UploadShape(const wire::UploadRequest& first) {
  const auto proto_dtype = static_cast<v1::DType>(first.dtype);
  const auto dtype = FromProto(proto_dtype);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: the first Upload message must set one of ", ProtoDTypeNames(),
                     ", got ", ProtoDTypeName(proto_dtype)));
  }
  for (const auto& [field, value] : {std::pair{"rows", first.rows}, {"cols", first.cols}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": the first Upload message must set it >= 1, got ", value));
    }
  }
  if (MatrixBytes(first.rows, first.cols, proto_dtype) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("rows, cols: ", first.rows, " x ", first.cols,
                                                   " ", ProtoDTypeName(proto_dtype),
                                                   ": its byte size overflows int64"));
  }
  return TensorShape{*dtype, first.rows, first.cols};
}

void ToProto(const TensorInfo& info, v1::TensorInfo* out) {
  out->set_id(info.id);
  out->set_dtype(ToProto(info.shape.dtype));
  out->set_rows(info.shape.rows);
  out->set_cols(info.shape.cols);
  out->set_bytes(info.bytes);
  out->set_device(info.device);
  out->set_expires_unix_ms(absl::ToUnixMillis(info.expires));
  out->set_server(info.server);
}

}  // namespace gpucompute::server
