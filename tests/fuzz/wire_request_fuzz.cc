// Differential fuzzing of the slice parser (proto/wire) against protobuf's
// generated classes: for any bytes, both must give the same verdict and the
// same field values.
//
// Input: byte 0 picks the message (MatMul, Transpose or Reduce request, a
// compute response, a DownloadResponse, an UploadRequest or an EchoRequest); byte 1 & 7 is a count
// k of cut points and the next k bytes are the lengths of the first k slices (0 gives an empty
// slice; the last slice holds what is left); the rest is the message. Each slice is its own heap
// allocation, so AddressSanitizer sees a read past any of them.
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "wire/compute_wire.h"

namespace gpucompute::wire {
namespace {

enum class Kind { kMatMul, kTranspose, kReduce, kResponse, kDownload, kUpload, kEcho };
constexpr int kKinds = 7;

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kMatMul: return "MatMulRequest";
    case Kind::kTranspose: return "TransposeRequest";
    case Kind::kReduce: return "ReduceRequest";
    case Kind::kResponse: return "TransposeResponse (any compute response)";
    case Kind::kDownload: return "DownloadResponse";
    case Kind::kUpload: return "UploadRequest";
    case Kind::kEcho: return "EchoRequest";
  }
  return "?";
}

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// A slice over its own exact-size heap copy of the bytes.
grpc::Slice OwnSlice(const char* data, size_t n) {
  char* copy = new char[n];
  if (n > 0) std::memcpy(copy, data, n);
  return grpc::Slice(copy, n, [](void* p) { delete[] static_cast<char*>(p); });
}

struct Case {
  Kind kind;
  std::string message;
  std::vector<size_t> cuts;  // slice lengths
  std::vector<grpc::Slice> slices;
};

[[noreturn]] void Disagree(const Case& c, const std::string& what) {
  std::string lengths;
  for (const grpc::Slice& s : c.slices) lengths += std::to_string(s.size()) + " ";
  std::fprintf(stderr,
               "\nwire_request_fuzz: the slice parser disagrees with protobuf\n"
               "  message: %s\n  bytes (%zu): %s\n  slice lengths: %s\n  %s\n",
               KindName(c.kind), c.message.size(), Hex(c.message).c_str(), lengths.c_str(),
               what.c_str());
  std::abort();
}

std::string Joined(const std::vector<absl::Span<const char>>& pieces) {
  std::string out;
  for (const auto& p : pieces) out.append(p.data(), p.size());
  return out;
}

// Every piece of the payload lies inside one of the slices (none is a copy).
bool InsideSlices(const Case& c, const absl::Span<const char>& piece) {
  for (const grpc::Slice& s : c.slices) {
    const char* begin = reinterpret_cast<const char*>(s.begin());
    if (piece.data() >= begin && piece.data() + piece.size() <= begin + s.size()) return true;
  }
  return false;
}

template <typename A, typename B>
void Expect(const Case& c, const char* field, const A& ours, const B& theirs) {
  if (ours == theirs) return;
  Disagree(c, std::string(field) + ": slice parser " + std::to_string(ours) + ", protobuf " +
                  std::to_string(theirs));
}

void CompareString(const Case& c, const std::string& field, const std::string& ours,
                   const std::string& pb) {
  if (ours != pb) Disagree(c, field + ": slice parser " + Hex(ours) + ", protobuf " + Hex(pb));
}

void CompareSharedMemorySlice(const Case& c, const std::string& n, const SharedMemorySlice& ours,
                              const v1::SharedMemorySlice& pb) {
  CompareString(c, n + ".region", ours.region, pb.region());
  Expect(c, (n + ".offset").c_str(), ours.offset, pb.offset());
  Expect(c, (n + ".byte_size").c_str(), ours.byte_size, pb.byte_size());
}

// The oneof case as protobuf numbers it (its field number, 0 = not set).
int PayloadCase(Matrix::Payload p) {
  switch (p) {
    case Matrix::Payload::kNone: return v1::Matrix::PAYLOAD_NOT_SET;
    case Matrix::Payload::kData: return v1::Matrix::kData;
    case Matrix::Payload::kTensorId: return v1::Matrix::kTensorId;
    case Matrix::Payload::kSharedMemory: return v1::Matrix::kSharedMemory;
  }
  return -1;
}

// Every field, the members not set included (protobuf gives their defaults,
// and so must the slice parser).
void CompareMatrix(const Case& c, const char* name, const Matrix& ours, const v1::Matrix& pb) {
  const std::string n(name);
  Expect(c, (n + ".dtype").c_str(), ours.dtype, int(pb.dtype()));
  Expect(c, (n + ".rows").c_str(), ours.rows, pb.rows());
  Expect(c, (n + ".cols").c_str(), ours.cols, pb.cols());
  Expect(c, (n + ".payload case").c_str(), PayloadCase(ours.payload), int(pb.payload_case()));
  Expect(c, (n + ".data size").c_str(), ours.data_bytes, int64_t(pb.data().size()));
  const std::string joined = Joined(ours.data);
  if (joined != pb.data()) {
    Disagree(c, n + ".data: slice parser " + Hex(joined) + ", protobuf " + Hex(pb.data()));
  }
  for (const auto& piece : ours.data) {
    if (!InsideSlices(c, piece)) Disagree(c, n + ".data: a piece is not inside the slices");
  }
  CompareString(c, n + ".tensor_id", ours.tensor_id, pb.tensor_id());
  CompareSharedMemorySlice(c, n + ".shared_memory", ours.shared_memory, pb.shared_memory());
}

void CompareOutput(const Case& c, bool has_ours, const OutputPlacement& ours, bool has_pb,
                   const v1::OutputPlacement& pb) {
  Expect(c, "has output", int(has_ours), int(has_pb));
  Expect(c, "output.keep", int(ours.keep), int(pb.keep()));
  Expect(c, "output.has_shared_memory", int(ours.has_shared_memory), int(pb.has_shared_memory()));
  CompareSharedMemorySlice(c, "output.shared_memory", ours.shared_memory, pb.shared_memory());
  Expect(c, "output.ttl_seconds", ours.ttl_seconds, pb.ttl_seconds());
}

template <typename Proto>
bool ProtobufParses(const Case& c, Proto* msg) {
  return msg->ParseFromArray(c.message.data(), int(c.message.size()));
}

void Verdicts(const Case& c, bool pb_ok, const absl::Status& ours) {
  if (pb_ok == ours.ok()) return;
  Disagree(c, pb_ok ? "protobuf accepts, the slice parser refuses: " + ours.ToString()
                    : std::string("protobuf refuses, the slice parser accepts"));
}

void Check(const Case& c) {
  if (c.kind == Kind::kEcho) {
    v1::EchoRequest pb;
    const bool pb_ok = ProtobufParses(c, &pb);
    auto ours = ParseEchoRequest(c.slices);
    Verdicts(c, pb_ok, ours.status());
    if (!pb_ok) return;
    Expect(c, "response_bytes", ours->response_bytes, pb.response_bytes());
    Expect(c, "payload bytes", ours->payload_bytes, int64_t(pb.payload().size()));
    return;
  }
  if (c.kind == Kind::kUpload) {
    v1::UploadRequest pb;
    const bool pb_ok = ProtobufParses(c, &pb);
    auto ours = ParseUploadRequest(c.slices);
    Verdicts(c, pb_ok, ours.status());
    if (!pb_ok) return;
    Expect(c, "dtype", ours->dtype, int(pb.dtype()));
    Expect(c, "rows", ours->rows, pb.rows());
    Expect(c, "cols", ours->cols, pb.cols());
    Expect(c, "ttl_seconds", ours->ttl_seconds, pb.ttl_seconds());
    Expect(c, "has shared_memory", int(ours->has_shared_memory), int(pb.has_shared_memory()));
    CompareSharedMemorySlice(c, "shared_memory", ours->shared_memory, pb.shared_memory());
    Expect(c, "data bytes", ours->data_bytes, int64_t(pb.data().size()));
    CompareString(c, "data", Joined(ours->data), pb.data());
    for (const auto& piece : ours->data) {
      if (!InsideSlices(c, piece)) Disagree(c, "data: a piece is not inside the slices");
    }
    return;
  }
  if (c.kind == Kind::kDownload) {
    v1::DownloadResponse pb;
    const bool pb_ok = ProtobufParses(c, &pb);
    auto ours = ParseDownloadResponse(c.slices);
    Verdicts(c, pb_ok, ours.status());
    if (!pb_ok) return;
    Expect(c, "has info", int(ours->has_info), int(pb.has_info()));
    CompareString(c, "info", ours->info.SerializeAsString(), pb.info().SerializeAsString());
    std::string data;
    for (const auto& piece : ours->data) data.append(piece.data(), piece.size());
    Expect(c, "data bytes", ours->data_bytes, int64_t(pb.data().size()));
    CompareString(c, "data", data, pb.data());
    return;
  }
  if (c.kind == Kind::kResponse) {
    v1::TransposeResponse pb;
    const bool pb_ok = ProtobufParses(c, &pb);
    auto ours = ParseComputeResponse(c.slices);
    Verdicts(c, pb_ok, ours.status());
    if (!pb_ok) return;
    CompareMatrix(c, "output", ours->output, pb.output());
    CompareString(c, "report", ours->report.SerializeAsString(), pb.report().SerializeAsString());
    return;
  }
  const v1::Op op = c.kind == Kind::kMatMul      ? v1::OP_MATMUL
                    : c.kind == Kind::kTranspose ? v1::OP_TRANSPOSE
                                                 : v1::OP_REDUCE;
  auto ours = ParseComputeRequest(op, c.slices);
  bool pb_ok = false;
  v1::Matrix pb_a, pb_b;
  v1::OutputPlacement pb_output;
  bool pb_has_output = false;
  std::string pb_variant;
  bool pb_tf32 = false;
  int pb_op = 0, pb_axis = 0, pb_output_dtype = 0;
  if (c.kind == Kind::kMatMul) {
    v1::MatMulRequest pb;
    pb_ok = ProtobufParses(c, &pb);
    pb_a = pb.a();
    pb_b = pb.b();
    pb_variant = pb.variant();
    pb_tf32 = pb.allow_tf32();
    pb_output_dtype = pb.output_dtype();
    pb_has_output = pb.has_output();
    pb_output = pb.output();
  } else if (c.kind == Kind::kTranspose) {
    v1::TransposeRequest pb;
    pb_ok = ProtobufParses(c, &pb);
    pb_a = pb.input();
    pb_variant = pb.variant();
    pb_has_output = pb.has_output();
    pb_output = pb.output();
  } else {
    v1::ReduceRequest pb;
    pb_ok = ProtobufParses(c, &pb);
    pb_a = pb.input();
    pb_variant = pb.variant();
    pb_op = pb.op();
    pb_axis = pb.axis();
    pb_output_dtype = pb.output_dtype();
    pb_has_output = pb.has_output();
    pb_output = pb.output();
  }
  Verdicts(c, pb_ok, ours.status());
  if (!pb_ok) return;
  CompareMatrix(c, "a (input)", ours->a, pb_a);
  CompareMatrix(c, "b", ours->b, pb_b);
  CompareString(c, "variant", ours->variant, pb_variant);
  Expect(c, "allow_tf32", int(ours->allow_tf32), int(pb_tf32));
  Expect(c, "reduce_op", ours->reduce_op, pb_op);
  Expect(c, "reduce_axis", ours->reduce_axis, pb_axis);
  Expect(c, "output_dtype", ours->output_dtype, pb_output_dtype);
  CompareOutput(c, ours->has_output, ours->output, pb_has_output, pb_output);
}

}  // namespace
}  // namespace gpucompute::wire

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs each string that is not UTF-8; the verdict is what counts.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpucompute::wire;
  if (size < 2) return 0;
  Case c;
  c.kind = static_cast<Kind>(data[0] % kKinds);
  size_t at = 2;
  const size_t cuts = data[1] & 7;
  for (size_t i = 0; i < cuts && at < size; ++i) c.cuts.push_back(data[at++]);
  c.message.assign(reinterpret_cast<const char*>(data) + at, size - at);
  size_t pos = 0;
  for (size_t n : c.cuts) {
    n = std::min(n, c.message.size() - pos);
    c.slices.push_back(OwnSlice(c.message.data() + pos, n));
    pos += n;
  }
  c.slices.push_back(OwnSlice(c.message.data() + pos, c.message.size() - pos));
  Check(c);
  return 0;
}
