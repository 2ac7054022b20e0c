#include "wire/compute_wire.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gpucompute::wire {
namespace {

constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kStartGroup = 3, kEndGroup = 4,
              kFixed32 = 5;

// Any bytes must get the verdict and the values that protobuf's generated
// classes give them, so these are the limits of its parser (3.21,
// parse_context.{h,cc}):
//  - a tag is a varint of at most 5 bytes, taken modulo 2^32;
//  - a length is a varint of at most 5 bytes, the fifth below 8, and at most
//    INT_MAX - 16 (ParseContext::kSlopBytes);
//  - an integer is a varint of at most 10 bytes, taken modulo 2^64;
//  - a message nests at most 100 deep (CodedInputStream's default recursion
//    limit): each embedded message and each group costs one level;
//  - a whole message is at most INT_MAX bytes.
constexpr int kRecursionLimit = 100;
constexpr uint32_t kMaxLength = uint32_t(INT_MAX) - 16;

// Reads the protobuf wire format across a sequence of slices, never past
// the end of the message being read (its limit).
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const grpc::Slice& s : slices) limit_ += int64_t(s.size());
    size_ = limit_;
    SkipEmptySlices();
  }
  int64_t position() const { return position_; }
  int64_t size() const { return size_; }
  bool AtLimit() const { return position_ >= limit_; }

  // Bounds reads to the next `length` bytes (which must lie within the
  // current limit); returns the limit to restore.
  int64_t PushLimit(int64_t length) {
    const int64_t old = limit_;
    limit_ = position_ + length;
    return old;
  }
  void PopLimit(int64_t old) { limit_ = old; }

  bool ReadByte(uint8_t* byte) {
    if (position_ >= limit_) return false;
    *byte = uint8_t(Current()[0]);
    Advance(1);
    return true;
  }

  // An integer: at most 10 bytes, bits past 64 dropped.
  bool ReadVarint(uint64_t* value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      v |= uint64_t(byte & 0x7f) << shift;
      if (byte < 0x80) {
        *value = v;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }

  // A tag: at most 5 bytes, bits past 32 dropped.
  bool ReadTag(uint32_t* tag) {
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
      uint8_t byte;
      if (!ReadByte(&byte)) return false;
      v |= uint32_t(byte & 0x7f) << shift;
      if (byte < 0x80) {
        *tag = v;
        return true;
      }
    }
    return false;  // more than 5 bytes
  }

  // The length of a length-delimited value: at most 5 bytes, the fifth
  // below 8, at most kMaxLength, and the value must fit before the limit.
  bool ReadLength(int64_t* length) {
    uint32_t v = 0;
    uint8_t byte;
    for (int shift = 0; shift < 28; shift += 7) {
      if (!ReadByte(&byte)) return false;
      v |= uint32_t(byte & 0x7f) << shift;
      if (byte < 0x80) return Fits(v, length);
    }
    if (!ReadByte(&byte) || byte >= 8) return false;
    v |= uint32_t(byte) << 28;
    return Fits(v, length);
  }

  // Moves past `n` bytes (n <= bytes left before the limit), calling
  // `piece(data, size)` on each run of them within one slice.
  template <typename PieceFn>
  void Consume(int64_t n, PieceFn&& piece) {
    while (n > 0) {
      const int64_t here = std::min<int64_t>(n, int64_t(slices_[index_].size() - offset_));
      piece(Current(), size_t(here));
      Advance(here);
      n -= here;
    }
  }
  bool Skip(int64_t n) {
    if (n > limit_ - position_) return false;
    Consume(n, [](const char*, size_t) {});
    return true;
  }

 private:
  bool Fits(uint32_t v, int64_t* length) const {
    if (v > kMaxLength || int64_t(v) > limit_ - position_) return false;
    *length = int64_t(v);
    return true;
  }
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
  int64_t limit_ = 0;
  int64_t size_ = 0;
};

absl::Status Malformed(const std::string& what, int64_t at) {
  return absl::InvalidArgumentError(
      absl::StrCat("not a valid protobuf message (", what, " at byte ", at, ")"));
}

bool SkipGroup(SliceReader& in, uint32_t number, int depth);

// Skips the value of a field this reader does not know, or knows under
// another wire type (protobuf keeps both as unknown fields). `depth`: the
// nesting levels left.
bool SkipField(SliceReader& in, uint32_t number, int type, int depth) {
  uint64_t v = 0;
  int64_t length = 0;
  switch (type) {
    case kVarint: return in.ReadVarint(&v);
    case kFixed64: return in.Skip(8);
    case kLengthDelimited: return in.ReadLength(&length) && in.Skip(length);
    case kStartGroup: return SkipGroup(in, number, depth - 1);
    case kFixed32: return in.Skip(4);
    default: return false;  // 4 (end group) is the caller's; 6 and 7 do not exist
  }
}

// Skips the fields of a group up to the end-group tag of the same number.
bool SkipGroup(SliceReader& in, uint32_t number, int depth) {
  if (depth < 0) return false;
  while (!in.AtLimit()) {
    uint32_t tag = 0;
    if (!in.ReadTag(&tag) || tag == 0) return false;
    if ((tag & 7) == kEndGroup) return (tag >> 3) == number;
    if ((tag >> 3) == 0 || !SkipField(in, tag >> 3, int(tag & 7), depth)) return false;
  }
  return false;  // the message ended inside the group
}

// Reads the fields of the message that ends at the reader's limit.
// `field(number, type, at)` reads the value of a field it knows under that
// wire type and returns how that went, or returns std::nullopt to have the
// field skipped as unknown (`at`: where its tag starts, for errors).
using FieldResult = std::optional<absl::Status>;

template <typename FieldFn>
absl::Status ForEachField(SliceReader& in, int depth, FieldFn&& field) {
  while (!in.AtLimit()) {
    const int64_t at = in.position();
    uint32_t tag = 0;
    // Tag 0 and end-group tags end a message only inside a group: protobuf
    // refuses them here, as it refuses field number 0.
    if (!in.ReadTag(&tag) || (tag >> 3) == 0 || (tag & 7) == kEndGroup) {
      return Malformed("bad field tag", at);
    }
    const uint32_t number = tag >> 3;
    const int type = int(tag & 7);
    if (FieldResult read = field(number, type, at)) {
      if (!read->ok()) return *std::move(read);
    } else if (!SkipField(in, number, type, depth)) {
      return Malformed(absl::StrCat("bad unknown field ", number, " of wire type ", type), at);
    }
  }
  return absl::OkStatus();
}

// Structurally valid UTF-8 (what protobuf requires of proto3 strings):
// shortest forms only, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return false;
    }
    if (end - p <= n || p[1] < lo || p[1] > hi) return false;
    for (int i = 2; i <= n; ++i) {
      if (p[i] < 0x80 || p[i] > 0xbf) return false;
    }
    p += n + 1;
  }
  return true;
}

// A varint field's value (kVarint only: another wire type makes it unknown).
template <typename T>
absl::Status ReadInt(SliceReader& in, int64_t at, T* out) {
  uint64_t v = 0;
  if (!in.ReadVarint(&v)) return Malformed("bad varint", at);
  *out = T(v);  // enums, bool and int64 as protobuf converts them
  return absl::OkStatus();
}

absl::Status ReadString(SliceReader& in, int64_t at, std::string* out) {
  int64_t length = 0;
  if (!in.ReadLength(&length)) return Malformed("bad string length", at);
  out->clear();
  in.Consume(length, [&](const char* p, size_t n) { out->append(p, n); });
  if (!IsValidUtf8(*out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("string field at byte ", at, " is not valid UTF-8"));
  }
  return absl::OkStatus();
}

// Reads an embedded message (its length, then its fields up to its end)
// held by a message that has `depth` nesting levels left: it takes one more,
// as protobuf's ParseMessage does. `field` is as in ForEachField.
template <typename FieldFn>
absl::Status ReadMessage(SliceReader& in, int64_t at, int depth, const char* what,
                         FieldFn&& field) {
  int64_t length = 0;
  if (!in.ReadLength(&length)) return Malformed(absl::StrCat("bad ", what, " length"), at);
  if (depth - 1 < 0) return Malformed("nested too deep", at);
  const int64_t old_limit = in.PushLimit(length);
  absl::Status status = ForEachField(in, depth - 1, field);
  in.PopLimit(old_limit);
  return status;
}

// Merges a SharedMemorySlice message into `s` (later fields win).
absl::Status ReadSharedMemorySlice(SliceReader& in, int64_t at, int depth, SharedMemorySlice& s) {
  return ReadMessage(in, at, depth, "SharedMemorySlice",
                     [&](uint32_t number, int type, int64_t at) -> FieldResult {
                       if (number == 1 && type == kLengthDelimited) {
                         return ReadString(in, at, &s.region);
                       }
                       if (number == 2 && type == kVarint) return ReadInt(in, at, &s.offset);
                       if (number == 3 && type == kVarint) return ReadInt(in, at, &s.byte_size);
                       return std::nullopt;
                     });
}

// Makes `p` the oneof member that is set, as protobuf's _internal_mutable_*
// do: switching to another member clears the one set before (so a message
// member starts fresh), staying on the same one keeps it (a message member
// merges, a bytes or string member is then replaced by its reader).
void SetPayload(Matrix& m, Matrix::Payload p) {
  if (m.payload == p) return;
  switch (m.payload) {
    case Matrix::Payload::kData:
      m.data.clear();
      m.data_bytes = 0;
      break;
    case Matrix::Payload::kTensorId: m.tensor_id.clear(); break;
    case Matrix::Payload::kSharedMemory: m.shared_memory = SharedMemorySlice(); break;
    case Matrix::Payload::kNone: break;
  }
  m.payload = p;
}

// Merges a Matrix message into `m` (later fields win, as protobuf does).
absl::Status ReadMatrix(SliceReader& in, int64_t at, int depth, Matrix& m) {
  return ReadMessage(
      in, at, depth, "Matrix", [&](uint32_t number, int type, int64_t at) -> FieldResult {
        if (number == 4 && type == kLengthDelimited) {  // bytes data: the later one wins
          int64_t n = 0;
          if (!in.ReadLength(&n)) return Malformed("bad data length", at);
          SetPayload(m, Matrix::Payload::kData);
          m.data.clear();
          m.data_bytes = n;
          in.Consume(n, [&](const char* p, size_t size) { m.data.emplace_back(p, size); });
          return absl::OkStatus();
        }
        if (number == 1 && type == kVarint) return ReadInt(in, at, &m.dtype);
        if (number == 2 && type == kVarint) return ReadInt(in, at, &m.rows);
        if (number == 3 && type == kVarint) return ReadInt(in, at, &m.cols);
        if (number == 5 && type == kLengthDelimited) {  // string tensor_id
          SetPayload(m, Matrix::Payload::kTensorId);
          return ReadString(in, at, &m.tensor_id);
        }
        if (number == 6 && type == kLengthDelimited) {  // SharedMemorySlice shared_memory
          SetPayload(m, Matrix::Payload::kSharedMemory);
          return ReadSharedMemorySlice(in, at, depth - 1, m.shared_memory);
        }
        return std::nullopt;
      });
}

// Merges an OutputPlacement message into `o`.
absl::Status ReadOutputPlacement(SliceReader& in, int64_t at, int depth, OutputPlacement& o) {
  return ReadMessage(in, at, depth, "OutputPlacement",
                     [&](uint32_t number, int type, int64_t at) -> FieldResult {
                       if (number == 1 && type == kVarint) return ReadInt(in, at, &o.keep);
                       if (number == 2 && type == kLengthDelimited) {
                         o.has_shared_memory = true;
                         return ReadSharedMemorySlice(in, at, depth - 1, o.shared_memory);
                       }
                       if (number == 3 && type == kVarint) return ReadInt(in, at, &o.ttl_seconds);
                       return std::nullopt;
                     });
}

// Field numbers of each request message in compute.proto.
struct RequestFields {
  uint32_t a, b, variant, allow_tf32, reduce_op, reduce_axis, output_dtype, output;  // 0: absent
};

RequestFields FieldsOf(v1::Op op) {
  switch (op) {
    case v1::OP_MATMUL: return {1, 2, 3, 4, 0, 0, 5, 10};
    case v1::OP_TRANSPOSE: return {1, 0, 2, 0, 0, 0, 0, 10};
    case v1::OP_REDUCE: return {1, 0, 4, 0, 2, 3, 5, 10};
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

void AppendTag(std::string& out, int number, int type) {
  AppendVarint(out, uint64_t(number) << 3 | type);
}

absl::Status CheckSize(const SliceReader& in) {
  if (in.size() > INT_MAX) return Malformed("message of more than INT_MAX bytes", 0);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ComputeRequest> ParseComputeRequest(v1::Op op,
                                                   const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  if (auto s = CheckSize(in); !s.ok()) return s;
  const RequestFields f = FieldsOf(op);
  ComputeRequest req;
  // Field numbers are never 0 here, so an absent field (0) matches nothing.
  auto field = [&](uint32_t number, int type, int64_t at) -> FieldResult {
    if (type == kLengthDelimited) {
      if (number == f.a) return ReadMatrix(in, at, kRecursionLimit, req.a);
      if (number == f.b) return ReadMatrix(in, at, kRecursionLimit, req.b);
      if (number == f.variant) return ReadString(in, at, &req.variant);
      if (number == f.output) {
        req.has_output = true;
        return ReadOutputPlacement(in, at, kRecursionLimit, req.output);
      }
    } else if (type == kVarint) {
      if (number == f.allow_tf32) return ReadInt(in, at, &req.allow_tf32);
      if (number == f.reduce_op) return ReadInt(in, at, &req.reduce_op);
      if (number == f.reduce_axis) return ReadInt(in, at, &req.reduce_axis);
      if (number == f.output_dtype) return ReadInt(in, at, &req.output_dtype);
    }
    return std::nullopt;
  };
  absl::Status status = ForEachField(in, kRecursionLimit, field);
  if (!status.ok()) return status;
  return req;
}

absl::StatusOr<ComputeResponse> ParseComputeResponse(const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  if (auto s = CheckSize(in); !s.ok()) return s;
  ComputeResponse resp;
  // Each ExecutionReport, still wrapped as field 2, for protobuf to parse
  // and merge at the end (a report is small).
  std::string reports;
  auto field = [&](uint32_t number, int type, int64_t at) -> FieldResult {
    if (type != kLengthDelimited) return std::nullopt;
    if (number == 1) return ReadMatrix(in, at, kRecursionLimit, resp.output);
    if (number == 2) {
      int64_t length = 0;
      if (!in.ReadLength(&length)) return Malformed("bad report length", at);
      AppendTag(reports, 2, kLengthDelimited);
      AppendVarint(reports, uint64_t(length));
      in.Consume(length, [&](const char* p, size_t n) { reports.append(p, n); });
      return absl::OkStatus();
    }
    return std::nullopt;
  };
  absl::Status status = ForEachField(in, kRecursionLimit, field);
  if (!status.ok()) return status;
  if (!reports.empty()) {
    // Parsed as the field of a response, so that the nesting limit is the same.
    v1::TransposeResponse holder;
    if (!holder.ParseFromString(reports)) {
      return absl::InvalidArgumentError("report: not a valid ExecutionReport");
    }
    resp.report = std::move(*holder.mutable_report());
  }
  return resp;
}

absl::StatusOr<DownloadResponse> ParseDownloadResponse(const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  if (auto s = CheckSize(in); !s.ok()) return s;
  DownloadResponse resp;
  std::string infos;  // each TensorInfo, still wrapped as field 1, parsed at the end
  auto field = [&](uint32_t number, int type, int64_t at) -> FieldResult {
    if (type != kLengthDelimited || (number != 1 && number != 2)) return std::nullopt;
    int64_t length = 0;
    if (!in.ReadLength(&length)) return Malformed("bad length", at);
    if (number == 1) {
      resp.has_info = true;
      AppendTag(infos, 1, kLengthDelimited);
      AppendVarint(infos, uint64_t(length));
      in.Consume(length, [&](const char* p, size_t n) { infos.append(p, n); });
    } else {
      resp.data.clear();
      resp.data_bytes = length;
      in.Consume(length, [&](const char* p, size_t n) { resp.data.emplace_back(p, n); });
    }
    return absl::OkStatus();
  };
  absl::Status status = ForEachField(in, kRecursionLimit, field);
  if (!status.ok()) return status;
  if (resp.has_info) {
    v1::DownloadResponse holder;  // parsed as the field of a response: the same nesting limit
    if (!holder.ParseFromString(infos)) {
      return absl::InvalidArgumentError("info: not a valid TensorInfo");
    }
    resp.info = std::move(*holder.mutable_info());
  }
  return resp;
}

absl::StatusOr<UploadRequest> ParseUploadRequest(const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  if (auto s = CheckSize(in); !s.ok()) return s;
  UploadRequest req;
  auto field = [&](uint32_t number, int type, int64_t at) -> FieldResult {
    if (type == kVarint) {
      switch (number) {
        case 1: return ReadInt(in, at, &req.dtype);
        case 2: return ReadInt(in, at, &req.rows);
        case 3: return ReadInt(in, at, &req.cols);
        case 4: return ReadInt(in, at, &req.ttl_seconds);
        default: return std::nullopt;
      }
    }
    if (type != kLengthDelimited) return std::nullopt;
    if (number == 5) {  // bytes data: the later one wins
      int64_t n = 0;
      if (!in.ReadLength(&n)) return Malformed("bad data length", at);
      req.data.clear();
      req.data_bytes = n;
      in.Consume(n, [&](const char* p, size_t size) { req.data.emplace_back(p, size); });
      return absl::OkStatus();
    }
    if (number == 6) {
      req.has_shared_memory = true;
      return ReadSharedMemorySlice(in, at, kRecursionLimit, req.shared_memory);
    }
    return std::nullopt;
  };
  absl::Status status = ForEachField(in, kRecursionLimit, field);
  if (!status.ok()) return status;
  return req;
}

absl::StatusOr<EchoRequest> ParseEchoRequest(const std::vector<grpc::Slice>& slices) {
  SliceReader in(slices);
  if (auto s = CheckSize(in); !s.ok()) return s;
  EchoRequest req;
  auto field = [&](uint32_t number, int type, int64_t at) -> FieldResult {
    if (number == 1 && type == kVarint) return ReadInt(in, at, &req.response_bytes);
    if (number == 2 && type == kLengthDelimited) {  // bytes payload: skipped, its size kept
      int64_t n = 0;
      if (!in.ReadLength(&n)) return Malformed("bad payload length", at);
      req.payload_bytes = n;
      in.Consume(n, [](const char*, size_t) {});
      return absl::OkStatus();
    }
    return std::nullopt;
  };
  absl::Status status = ForEachField(in, kRecursionLimit, field);
  if (!status.ok()) return status;
  return req;
}

void Gather(const std::vector<absl::Span<const char>>& pieces, char* dst) {
  for (const auto& p : pieces) {
    std::memcpy(dst, p.data(), p.size());
    dst += p.size();
  }
}

namespace {

void AppendLengthDelimited(std::string& out, int field, const std::string& value) {
  AppendTag(out, field, kLengthDelimited);
  AppendVarint(out, value.size());
  out += value;
}

// A Matrix's dtype, rows and cols, each only when not zero (as protobuf
// writes proto3 scalars).
std::string MatrixShape(v1::DType dtype, int64_t rows, int64_t cols) {
  std::string out;
  if (dtype != 0) {
    AppendTag(out, 1, kVarint);
    AppendVarint(out, uint64_t(int64_t(dtype)));
  }
  if (rows != 0) {
    AppendTag(out, 2, kVarint);
    AppendVarint(out, uint64_t(rows));
  }
  if (cols != 0) {
    AppendTag(out, 3, kVarint);
    AppendVarint(out, uint64_t(cols));
  }
  return out;
}

// The fields of a SharedMemorySlice message, zeros left out.
std::string SharedMemorySliceBody(const SharedMemorySlice& s) {
  std::string out;
  if (!s.region.empty()) AppendLengthDelimited(out, 1, s.region);
  if (s.offset != 0) {
    AppendTag(out, 2, kVarint);
    AppendVarint(out, uint64_t(s.offset));
  }
  if (s.byte_size != 0) {
    AppendTag(out, 3, kVarint);
    AppendVarint(out, uint64_t(s.byte_size));
  }
  return out;
}

}  // namespace

void MessageWriter::VarintField(int field, uint64_t value) {
  AppendTag(pending_, field, kVarint);
  AppendVarint(pending_, value);
}

void MessageWriter::BytesField(int field, const std::string& value) {
  AppendLengthDelimited(pending_, field, value);
}

void MessageWriter::SliceField(int field, grpc::Slice payload) {
  SlicesField(field, absl::MakeSpan(&payload, 1));
}

void MessageWriter::SlicesField(int field, absl::Span<grpc::Slice> pieces) {
  size_t length = 0;
  for (const grpc::Slice& p : pieces) length += p.size();
  AppendTag(pending_, field, kLengthDelimited);
  AppendVarint(pending_, length);
  slices_.emplace_back(pending_);
  pending_.clear();
  for (grpc::Slice& p : pieces) slices_.push_back(std::move(p));
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

void MessageWriter::MatrixTensorField(int field, v1::DType dtype, int64_t rows, int64_t cols,
                                      const std::string& tensor_id) {
  std::string matrix = MatrixShape(dtype, rows, cols);
  AppendLengthDelimited(matrix, 5, tensor_id);  // a oneof member: written even when ""
  AppendLengthDelimited(pending_, field, matrix);
}

void MessageWriter::MatrixSharedMemoryField(int field, v1::DType dtype, int64_t rows, int64_t cols,
                                            const SharedMemorySlice& slice) {
  std::string matrix = MatrixShape(dtype, rows, cols);
  AppendLengthDelimited(matrix, 6, SharedMemorySliceBody(slice));
  AppendLengthDelimited(pending_, field, matrix);
}

void MessageWriter::OutputPlacementField(int field, const OutputPlacement& output) {
  std::string placement;
  if (output.keep) {
    AppendTag(placement, 1, kVarint);
    AppendVarint(placement, 1);
  }
  if (output.has_shared_memory) {
    AppendLengthDelimited(placement, 2, SharedMemorySliceBody(output.shared_memory));
  }
  if (output.ttl_seconds != 0) {
    AppendTag(placement, 3, kVarint);
    AppendVarint(placement, uint64_t(output.ttl_seconds));
  }
  AppendLengthDelimited(pending_, field, placement);
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

grpc::ByteBuffer EncodeComputeResponseWithTensor(v1::DType dtype, int64_t rows, int64_t cols,
                                                 const std::string& tensor_id,
                                                 const v1::ExecutionReport& report) {
  MessageWriter out;
  out.MatrixTensorField(1, dtype, rows, cols, tensor_id);
  out.BytesField(2, report.SerializeAsString());
  return out.Finish();
}

grpc::ByteBuffer EncodeComputeResponseWithSharedMemory(v1::DType dtype, int64_t rows, int64_t cols,
                                                       const SharedMemorySlice& slice,
                                                       const v1::ExecutionReport& report) {
  MessageWriter out;
  out.MatrixSharedMemoryField(1, dtype, rows, cols, slice);
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
