#include "wire/compute_wire.h"

#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"

namespace gpucompute::wire {
namespace {

constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// Reads the protobuf wire format across a sequence of slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& s : slices) size_ += int64_t(s.size());
    SkipEmptySlices();
  }
  int64_t position() const { return position_; }
  int64_t size() const { return size_; }

  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= size_) return false;
      const uint8_t byte = uint8_t(Current()[0]);
      Advance(1);
      *value |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80)) return true;
    }
    return false;  // more than 10 bytes
  }

  // Moves past `n` bytes, recording where they lie when `pieces` is given.
  bool Take(int64_t n, std::vector<absl::Span<const char>>* pieces) {
    if (n < 0 || n > size_ - position_) return false;
    while (n > 0) {
      const int64_t here = std::min<int64_t>(n, int64_t(slices_[index_].size() - offset_));
      if (pieces) pieces->emplace_back(Current(), size_t(here));
      Advance(here);
      n -= here;
    }
    return true;
  }

 private:
  const char* Current() const {
    return reinterpret_cast<const char*>(slices_[index_].begin()) + offset_;
  }
  void Advance(int64_t n) {
    offset_ += size_t(n);
    position_ += n;
    SkipEmptySlices();
  }
  void SkipEmptySlices() {
    while (index_ < slices_.size() && offset_ >= slices_[index_].size()) {
      ++index_;
      offset_ = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  size_t index_ = 0;
  size_t offset_ = 0;
  int64_t position_ = 0;
  int64_t size_ = 0;
};

absl::Status Malformed(const std::string& what, int64_t at) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a valid protobuf message (", what, " at byte ", at, ")"));
}

// Calls `field(number, wire_type, end)` for each field of the message that
// ends at `end`; `field` consumes the value and returns false on bad input.
template <typename FieldFn>
absl::Status ForEachField(SliceReader& in, int64_t end, FieldFn field) {
  while (in.position() < end) {
    uint64_t tag = 0;
    const int64_t at = in.position();
    if (!in.ReadVarint(&tag) || (tag >> 3) == 0) return Malformed("bad field tag", at);
    const int number = int(tag >> 3), type = int(tag & 7);
    if (auto s = field(number, type); !s.ok()) return s;
    if (in.position() > end) return Malformed("field runs past its message", at);
  }
  return absl::OkStatus();
}

// Skips one value of a field this reader does not use.
absl::Status SkipValue(SliceReader& in, int type) {
  const int64_t at = in.position();
  uint64_t v = 0;
  switch (type) {
    case kVarint: return in.ReadVarint(&v) ? absl::OkStatus() : Malformed("bad varint", at);
    case kFixed64: return in.Take(8, nullptr) ? absl::OkStatus() : Malformed("truncated", at);
    case kFixed32: return in.Take(4, nullptr) ? absl::OkStatus() : Malformed("truncated", at);
    case kLengthDelimited:
      return in.ReadVarint(&v) && in.Take(int64_t(v), nullptr) ? absl::OkStatus()
                                                                : Malformed("truncated", at);
    default: return Malformed("unsupported wire type", at);
  }
}

absl::Status ReadVarintField(SliceReader& in, int type, int64_t* out) {
  const int64_t at = in.position();
  uint64_t v = 0;
  if (type != kVarint || !in.ReadVarint(&v)) return Malformed("bad integer field", at);
  *out = int64_t(v);
  return absl::OkStatus();
}

// The extent of a length-delimited value: [position, end).
absl::StatusOr<int64_t> ReadLength(SliceReader& in, int type) {
  const int64_t at = in.position();
  uint64_t len = 0;
  if (type != kLengthDelimited || !in.ReadVarint(&len) ||
      len > uint64_t(in.size() - in.position())) {
    return Malformed("bad length-delimited field", at);
  }
  return in.position() + int64_t(len);
}

absl::Status ReadString(SliceReader& in, int type, std::string* out) {
  auto end = ReadLength(in, type);
  if (!end.ok()) return end.status();
  std::vector<absl::Span<const char>> pieces;
  in.Take(*end - in.position(), &pieces);
  out->clear();
  for (const auto& p : pieces) out->append(p.data(), p.size());
  return absl::OkStatus();
}

// Merges a Matrix message into `m` (later fields win, as protobuf does).
absl::Status ReadMatrix(SliceReader& in, int type, Matrix& m) {
  auto end = ReadLength(in, type);
  if (!end.ok()) return end.status();
  return ForEachField(in, *end, [&](int number, int t) -> absl::Status {
    int64_t v = 0;
    switch (number) {
      case 1:
        if (auto s = ReadVarintField(in, t, &v); !s.ok()) return s;
        m.dtype = int(v);
        return absl::OkStatus();
      case 2: return ReadVarintField(in, t, &m.rows);
      case 3: return ReadVarintField(in, t, &m.cols);
      case 4: {
        auto data_end = ReadLength(in, t);
        if (!data_end.ok()) return data_end.status();
        m.data.clear();
        m.data_bytes = *data_end - in.position();
        in.Take(m.data_bytes, &m.data);
        return absl::OkStatus();
      }
      default: return SkipValue(in, t);
    }
  });
}

// Field numbers of each request message in compute.proto.
struct RequestFields {
  int a, b, variant, allow_tf32, reduce_op, reduce_axis;  // 0: absent
};

RequestFields FieldsOf(v1::Op op) {
  switch (op) {
    case v1::OP_MATMUL: return {1, 2, 3, 4, 0, 0};
    case v1::OP_TRANSPOSE: return {1, 0, 2, 0, 0, 0};
    case v1::OP_REDUCE: return {1, 0, 4, 0, 2, 3};
    default: return {};
  }
}

void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(v | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void AppendTag(std::string& out, int number, int type) { AppendVarint(out, uint64_t(number) << 3 | type); }

}  // namespace

absl::StatusOr<ComputeRequest> ParseComputeRequest(v1::Op op,
                                                   const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  const RequestFields f = FieldsOf(op);
  ComputeRequest req;
  auto status = ForEachField(in, in.size(), [&](int number, int type) -> absl::Status {
    int64_t v = 0;
    if (number == f.a) return ReadMatrix(in, type, req.a);
    if (number == f.b) return ReadMatrix(in, type, req.b);
    if (number == f.variant) return ReadString(in, type, &req.variant);
    if (number == f.allow_tf32) {
      if (auto s = ReadVarintField(in, type, &v); !s.ok()) return s;
      req.allow_tf32 = v != 0;
      return absl::OkStatus();
    }
    if (number == f.reduce_op || number == f.reduce_axis) {
      if (auto s = ReadVarintField(in, type, &v); !s.ok()) return s;
      (number == f.reduce_op ? req.reduce_op : req.reduce_axis) = int(v);
      return absl::OkStatus();
    }
    return SkipValue(in, type);
  });
  if (!status.ok()) return status;
  return req;
}

absl::StatusOr<ComputeResponse> ParseComputeResponse(const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  ComputeResponse resp;
  auto status = ForEachField(in, in.size(), [&](int number, int type) -> absl::Status {
    if (number == 1) return ReadMatrix(in, type, resp.output);
    if (number == 2) {
      std::string report;
      if (auto s = ReadString(in, type, &report); !s.ok()) return s;
      if (!resp.report.ParseFromString(report)) {
        return absl::InvalidArgumentError("report: not a valid ExecutionReport");
      }
      return absl::OkStatus();
    }
    return SkipValue(in, type);
  });
  if (!status.ok()) return status;
  return resp;
}

void Gather(const std::vector<absl::Span<const char>>& pieces, char* dst) {
  for (const auto& p : pieces) {
    std::memcpy(dst, p.data(), p.size());
    dst += p.size();
  }
}

void MessageWriter::VarintField(int field, uint64_t value) {
  AppendTag(pending_, field, kVarint);
  AppendVarint(pending_, value);
}

void MessageWriter::BytesField(int field, const std::string& value) {
  AppendTag(pending_, field, kLengthDelimited);
  AppendVarint(pending_, value.size());
  pending_ += value;
}

void MessageWriter::MatrixField(int field, v1::DType dtype, int64_t rows, int64_t cols,
                           grpc::Slice payload) {
  std::string head;  // the Matrix's fields before its payload bytes
  AppendTag(head, 1, kVarint);
  AppendVarint(head, uint64_t(int64_t(dtype)));
  AppendTag(head, 2, kVarint);
  AppendVarint(head, uint64_t(rows));
  AppendTag(head, 3, kVarint);
  AppendVarint(head, uint64_t(cols));
  AppendTag(head, 4, kLengthDelimited);
  AppendVarint(head, payload.size());
  AppendTag(pending_, field, kLengthDelimited);
  AppendVarint(pending_, head.size() + payload.size());
  pending_ += head;
  slices_.emplace_back(pending_);
  pending_.clear();
  slices_.push_back(std::move(payload));
}

grpc::ByteBuffer MessageWriter::Finish() {
  if (!pending_.empty()) slices_.emplace_back(pending_);
  pending_.clear();
  return grpc::ByteBuffer(slices_.data(), slices_.size());
}

grpc::ByteBuffer EncodeComputeResponse(v1::DType dtype, int64_t rows, int64_t cols,
                                       grpc::Slice payload, const v1::ExecutionReport& report) {
  MessageWriter out;
  out.MatrixField(1, dtype, rows, cols, std::move(payload));
  out.BytesField(2, report.SerializeAsString());
  return out.Finish();
}

grpc::Slice SliceOwning(std::unique_ptr<std::string> buffer,
                        std::function<void(std::unique_ptr<std::string>)> release) {
  struct Owner {
    std::unique_ptr<std::string> buffer;
    std::function<void(std::unique_ptr<std::string>)> release;
  };
  auto* owner = new Owner{std::move(buffer), std::move(release)};
  return grpc::Slice(
      owner->buffer->data(), owner->buffer->size(),
      [](void* p) {
        std::unique_ptr<Owner> o(static_cast<Owner*>(p));
        if (o->release) o->release(std::move(o->buffer));
      },
      owner);
}

}  // namespace gpucompute::wire
