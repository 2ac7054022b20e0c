// Requests read from slices match protobuf's own parse, however the bytes are
// split; malformed input is refused; responses written around a payload
// slice parse back as the proto messages.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "support/test_util.h"
#include "wire/compute_wire.h"

namespace gpucompute::wire {
namespace {

// `bytes` cut at random points into slices, some of them empty.
std::vector<grpc::Slice> RandomSlices(const std::string& bytes, std::mt19937_64& rng) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t n = std::min(bytes.size() - at, size_t(rng() % 700));
    slices.emplace_back(bytes.data() + at, n);
    at += n;
  }
  return slices;
}

std::string Joined(const std::vector<absl::Span<const char>>& pieces) {
  std::string out;
  for (const auto& p : pieces) out.append(p.data(), p.size());
  return out;
}

v1::Matrix RandomMatrix(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  v1::Matrix m;
  m.set_dtype(v1::DTYPE_FLOAT32);
  m.set_rows(rows);
  m.set_cols(cols);
  const auto v = testing::RandomValues<float>(rows * cols, rng);
  m.set_data(v.data(), v.size() * 4);
  return m;
}

TEST(Wire, RequestsMatchProtobufAtAnySplit) {
  const uint64_t seed = testing::FreshSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " trial " + std::to_string(trial));
    v1::MatMulRequest mm;
    *mm.mutable_a() = RandomMatrix(1 + rng() % 40, 1 + rng() % 40, rng);
    *mm.mutable_b() = RandomMatrix(1 + rng() % 40, 1 + rng() % 40, rng);
    mm.set_variant(trial % 2 ? "register_tiled" : "");
    mm.set_allow_tf32(trial % 3 == 0);
    if (trial % 4 == 1) mm.set_output_dtype(v1::DTYPE_FLOAT32);
    const std::string bytes = mm.SerializeAsString();
    const auto slices = RandomSlices(bytes, rng);
    auto req = ParseComputeRequest(v1::OP_MATMUL, slices);
    ASSERT_TRUE(req.ok()) << req.status();
    EXPECT_EQ(req->a.rows, mm.a().rows());
    EXPECT_EQ(req->a.cols, mm.a().cols());
    EXPECT_EQ(req->a.dtype, int(mm.a().dtype()));
    EXPECT_EQ(req->a.data_bytes, int64_t(mm.a().data().size()));
    EXPECT_EQ(Joined(req->a.data), mm.a().data());
    EXPECT_EQ(Joined(req->b.data), mm.b().data());
    EXPECT_EQ(req->b.cols, mm.b().cols());
    EXPECT_EQ(req->variant, mm.variant());
    EXPECT_EQ(req->allow_tf32, mm.allow_tf32());
    EXPECT_EQ(req->output_dtype, int(mm.output_dtype()));
    std::string gathered(size_t(req->a.data_bytes), '\0');
    Gather(req->a.data, gathered.data());
    EXPECT_EQ(gathered, mm.a().data());
  }
}

// An EchoRequest: the payload's size without its bytes, the later
// response_bytes winning, at any split; a payload past the message's end
// is refused.
TEST(Wire, EchoRequestsGiveTheirSizesAtAnySplit) {
  const uint64_t seed = testing::FreshSeed();
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 30; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " trial " + std::to_string(trial));
    v1::EchoRequest first, second;
    first.set_response_bytes(int64_t(rng() % 100000));
    first.mutable_payload()->assign(size_t(rng() % 3000), char(rng()));
    second.set_response_bytes(int64_t(rng() % 100000));
    // Both messages one after the other: protobuf merges them.
    const std::string bytes =
        first.SerializeAsString() + (trial % 2 ? second.SerializeAsString() : std::string());
    v1::EchoRequest merged;
    ASSERT_TRUE(merged.ParseFromString(bytes));
    auto req = ParseEchoRequest(RandomSlices(bytes, rng));
    ASSERT_TRUE(req.ok()) << req.status();
    EXPECT_EQ(req->response_bytes, merged.response_bytes());
    EXPECT_EQ(req->payload_bytes, int64_t(merged.payload().size()));
  }
  const std::string cut(
      "\x12\x05"
      "abc",
      5);  // a payload of 5 bytes with 3 sent
  EXPECT_FALSE(ParseEchoRequest({grpc::Slice(cut)}).ok());
}

TEST(Wire, ReduceAndTransposeFieldsAndUnknownFields) {
  std::mt19937_64 rng(testing::FreshSeed());
  v1::ReduceRequest r;
  *r.mutable_input() = RandomMatrix(7, 9, rng);
  r.set_op(v1::REDUCE_OP_MAX);
  r.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
  r.set_variant("cub");
  r.set_output_dtype(v1::DTYPE_FLOAT32);
  // A field this server does not know (number 15, varint) is skipped.
  const std::string bytes = r.SerializeAsString() + std::string("\x78\x2a", 2);
  // The parsed payload points into the slices: they must outlive `req`.
  const std::vector<grpc::Slice> slices = RandomSlices(bytes, rng);
  auto req = ParseComputeRequest(v1::OP_REDUCE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->reduce_op, int(v1::REDUCE_OP_MAX));
  EXPECT_EQ(req->reduce_axis, int(v1::REDUCE_AXIS_PER_COLUMN));
  EXPECT_EQ(req->variant, "cub");
  EXPECT_EQ(req->output_dtype, int(v1::DTYPE_FLOAT32));
  EXPECT_EQ(Joined(req->a.data), r.input().data());

  v1::TransposeRequest t;
  *t.mutable_input() = RandomMatrix(3, 5, rng);
  t.mutable_input()->set_rows(-4);  // negative int64: a ten-byte varint
  t.set_variant("shared");
  const std::vector<grpc::Slice> tslices = RandomSlices(t.SerializeAsString(), rng);
  auto treq = ParseComputeRequest(v1::OP_TRANSPOSE, tslices);
  ASSERT_TRUE(treq.ok()) << treq.status();
  EXPECT_EQ(treq->a.rows, -4);
  EXPECT_EQ(treq->variant, "shared");
}

TEST(Wire, MalformedRequestsAreRefused) {
  std::mt19937_64 rng(testing::FreshSeed());
  v1::TransposeRequest t;
  *t.mutable_input() = RandomMatrix(10, 10, rng);
  const std::string bytes = t.SerializeAsString();
  for (size_t cut : {size_t(1), size_t(5), bytes.size() / 2, bytes.size() - 1}) {
    auto req = ParseComputeRequest(v1::OP_TRANSPOSE, {grpc::Slice(bytes.data(), cut)});
    EXPECT_EQ(req.status().code(), absl::StatusCode::kInvalidArgument) << "cut at " << cut;
  }
  const std::string group = "\x0b";  // field 1 as a start-group: not in proto3
  EXPECT_FALSE(ParseComputeRequest(v1::OP_TRANSPOSE, {grpc::Slice(group)}).ok());
  EXPECT_TRUE(ParseComputeRequest(v1::OP_TRANSPOSE, {}).ok()) << "an empty message is valid";
}

TEST(Wire, ResponsesParseAsProtobufAndReleaseTheirPayload) {
  std::mt19937_64 rng(testing::FreshSeed());
  const auto values = testing::RandomValues<double>(6 * 4, rng);
  auto payload = std::make_unique<std::string>(reinterpret_cast<const char*>(values.data()),
                                               values.size() * 8);
  const std::string expected = *payload;
  int released = 0;
  v1::ExecutionReport report;
  report.set_variant("cublas");
  report.set_device("cuda:0 NVIDIA H200");
  report.set_total_us(1234);
  {
    grpc::ByteBuffer buffer =
        EncodeComputeResponse(v1::DTYPE_FLOAT64, 6, 4,
                              SliceOwning(std::move(payload),
                                          [&](std::unique_ptr<std::string> s) {
                                            EXPECT_EQ(*s, expected);
                                            ++released;
                                          }),
                              report);
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(buffer.Dump(&slices).ok());
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    v1::TransposeResponse resp;
    ASSERT_TRUE(resp.ParseFromString(bytes));
    EXPECT_EQ(resp.output().dtype(), v1::DTYPE_FLOAT64);
    EXPECT_EQ(resp.output().rows(), 6);
    EXPECT_EQ(resp.output().cols(), 4);
    EXPECT_EQ(resp.output().data(), expected);
    EXPECT_EQ(resp.report().variant(), "cublas");
    EXPECT_EQ(resp.report().total_us(), 1234);
    auto read = ParseComputeResponse(slices);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->output.rows, 6);
    EXPECT_EQ(read->output.data_bytes, int64_t(expected.size()));
    std::string gathered(expected.size(), '\0');
    Gather(read->output.data, gathered.data());
    EXPECT_EQ(gathered, expected);
    EXPECT_EQ(read->report.device(), "cuda:0 NVIDIA H200");
    EXPECT_EQ(released, 0) << "released while still referenced";
  }
  EXPECT_EQ(released, 1);
}

// ---- Agreement with protobuf on any bytes (tests/fuzz/wire_request_fuzz
// checks this at scale; these are the divergences it and a review found). ----

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(char(v | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
  return out;
}
std::string Tag(int number, int type) { return Varint(uint64_t(number) << 3 | type); }
std::string Ld(int number, const std::string& payload) {
  return Tag(number, 2) + Varint(payload.size()) + payload;
}
std::string Groups(int number, int depth) {
  std::string out;
  for (int i = 0; i < depth; ++i) out += Tag(number, 3);
  for (int i = 0; i < depth; ++i) out += Tag(number, 4);
  return out;
}

int PayloadCase(Matrix::Payload p) {
  switch (p) {
    case Matrix::Payload::kNone: return v1::Matrix::PAYLOAD_NOT_SET;
    case Matrix::Payload::kData: return v1::Matrix::kData;
    case Matrix::Payload::kTensorId: return v1::Matrix::kTensorId;
    case Matrix::Payload::kSharedMemory: return v1::Matrix::kSharedMemory;
  }
  return -1;
}

void ExpectSameSlice(const SharedMemorySlice& ours, const v1::SharedMemorySlice& pb) {
  EXPECT_EQ(ours.region, pb.region());
  EXPECT_EQ(ours.offset, pb.offset());
  EXPECT_EQ(ours.byte_size, pb.byte_size());
}

// Every field, the oneof members not set included (protobuf gives their
// defaults, and so must the slice parser).
void ExpectSameMatrix(const Matrix& ours, const v1::Matrix& pb) {
  EXPECT_EQ(ours.dtype, int(pb.dtype()));
  EXPECT_EQ(ours.rows, pb.rows());
  EXPECT_EQ(ours.cols, pb.cols());
  EXPECT_EQ(PayloadCase(ours.payload), int(pb.payload_case()));
  EXPECT_EQ(ours.data_bytes, int64_t(pb.data().size()));
  EXPECT_EQ(Joined(ours.data), pb.data());
  EXPECT_EQ(ours.tensor_id, pb.tensor_id());
  ExpectSameSlice(ours.shared_memory, pb.shared_memory());
}

void ExpectSameOutput(const ComputeRequest& ours, bool has_output, const v1::OutputPlacement& pb) {
  EXPECT_EQ(ours.has_output, has_output);
  EXPECT_EQ(ours.output.keep, pb.keep());
  EXPECT_EQ(ours.output.has_shared_memory, pb.has_shared_memory());
  ExpectSameSlice(ours.output.shared_memory, pb.shared_memory());
  EXPECT_EQ(ours.output.ttl_seconds, pb.ttl_seconds());
}

// Every way of cutting `bytes` in two (and not at all).
std::vector<std::vector<grpc::Slice>> Splits(const std::string& bytes) {
  std::vector<std::vector<grpc::Slice>> splits = {{grpc::Slice(bytes)}};
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    splits.push_back(
        {grpc::Slice(bytes.data(), cut), grpc::Slice(bytes.data() + cut, bytes.size() - cut)});
  }
  return splits;
}

// Parses `bytes` as `op`'s request with the generated class and with the
// slice parser (whole, and cut after every byte), and expects the same
// verdict and the same fields. Returns protobuf's verdict.
bool ExpectSameAsProtobuf(v1::Op op, const std::string& bytes) {
  v1::MatMulRequest mm;
  v1::TransposeRequest tr;
  v1::ReduceRequest rd;
  bool pb_ok = false;
  v1::Matrix a, b;
  std::string variant;
  bool tf32 = false;
  int reduce_op = 0, reduce_axis = 0, output_dtype = 0;
  bool has_output = false;
  v1::OutputPlacement output;
  if (op == v1::OP_MATMUL) {
    pb_ok = mm.ParseFromString(bytes);
    a = mm.a();
    b = mm.b();
    variant = mm.variant();
    tf32 = mm.allow_tf32();
    output_dtype = mm.output_dtype();
    has_output = mm.has_output();
    output = mm.output();
  } else if (op == v1::OP_TRANSPOSE) {
    pb_ok = tr.ParseFromString(bytes);
    a = tr.input();
    variant = tr.variant();
    has_output = tr.has_output();
    output = tr.output();
  } else {
    pb_ok = rd.ParseFromString(bytes);
    a = rd.input();
    variant = rd.variant();
    reduce_op = rd.op();
    reduce_axis = rd.axis();
    output_dtype = rd.output_dtype();
    has_output = rd.has_output();
    output = rd.output();
  }
  const auto splits = Splits(bytes);
  for (const auto& slices : splits) {
    SCOPED_TRACE("first slice " + std::to_string(slices[0].size()) + " bytes");
    auto req = ParseComputeRequest(op, slices);
    EXPECT_EQ(req.ok(), pb_ok) << req.status();
    if (!req.ok() || !pb_ok) continue;
    ExpectSameMatrix(req->a, a);
    ExpectSameMatrix(req->b, b);
    EXPECT_EQ(req->variant, variant);
    EXPECT_EQ(req->allow_tf32, tf32);
    EXPECT_EQ(req->reduce_op, reduce_op);
    EXPECT_EQ(req->reduce_axis, reduce_axis);
    EXPECT_EQ(req->output_dtype, output_dtype);
    ExpectSameOutput(*req, has_output, output);
  }
  return pb_ok;
}

// The same for a compute response (TransposeResponse stands for all three).
bool ExpectSameResponseAsProtobuf(const std::string& bytes) {
  v1::TransposeResponse pb;
  const bool pb_ok = pb.ParseFromString(bytes);
  const auto splits = Splits(bytes);
  for (const auto& slices : splits) {
    SCOPED_TRACE("first slice " + std::to_string(slices[0].size()) + " bytes");
    auto resp = ParseComputeResponse(slices);
    EXPECT_EQ(resp.ok(), pb_ok) << resp.status();
    if (!resp.ok() || !pb_ok) continue;
    ExpectSameMatrix(resp->output, pb.output());
    EXPECT_EQ(resp->report.SerializeAsString(), pb.report().SerializeAsString());
  }
  return pb_ok;
}

TEST(WireVsProtobuf, TagsAndLengthsLongerThanFiveBytesAreRefused) {
  // A 6-byte Matrix length: protobuf refuses (the parser used to accept).
  EXPECT_FALSE(
      ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Unhex("0a8c808080800008011001180122040000803f")));
  // The same length in 5 bytes is fine.
  EXPECT_TRUE(
      ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Unhex("0a8c8080800008011001180122040000803f")));
  // A 6-byte tag.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_REDUCE, Unhex("98808080800001")));
  // A 5-byte length whose fifth byte is 8 or more (>= 2 GiB), and one
  // above INT_MAX - 16: refused before the bytes are looked for.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(2, 2) + Unhex("8080808008") + "x"));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(2, 2) + Unhex("f0ffffff07") + "x"));
  // A 10-byte varint is fine (its bits past 64 dropped), 11 bytes is not.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_REDUCE, Tag(2, 0) + Unhex("ffffffffffffffffff7f")));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_REDUCE, Tag(2, 0) + Unhex("ffffffffffffffffff8001")));
}

TEST(WireVsProtobuf, FiveByteTagsKeepTheirLow32Bits) {
  // Field 3 (axis), varint, with bit 32 set in the tag: protobuf reads axis = 1.
  const std::string bytes = Unhex("0a1008011002180122080000803f00000040988080801001");
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_REDUCE, bytes));
  const std::vector<grpc::Slice> slices = {grpc::Slice(bytes)};  // outlives the parsed spans
  auto req = ParseComputeRequest(v1::OP_REDUCE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->reduce_axis, int(v1::REDUCE_AXIS_PER_ROW));
  EXPECT_EQ(req->a.rows, 2);
  // Enums keep the low 32 bits of a 64-bit varint.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_REDUCE, Tag(2, 0) + Varint(uint64_t{1} << 32 | 2)));
}

TEST(WireVsProtobuf, UnknownGroupsAndWrongWireTypesAreSkipped) {
  // An unknown group after a valid message.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Unhex("0a0c08011001180122040000803f2b2c")));
  // A known field (2: variant) with the wrong wire type (varint): unknown.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Unhex("0a0c08011001180122040000803f1000")));
  // The Matrix as a varint, inside fields as fixed32/64 and groups, nested groups.
  EXPECT_TRUE(ExpectSameAsProtobuf(
      v1::OP_MATMUL, Tag(1, 0) + Varint(5) + Tag(2, 5) + "abcd" + Tag(3, 1) + "12345678"));
  EXPECT_TRUE(ExpectSameAsProtobuf(
      v1::OP_MATMUL,
      Ld(1, Tag(1, 2) + Varint(1) + "x" + Tag(4, 0) + Varint(9) + Groups(4, 3) + Ld(4, "abcd")) +
          Tag(15, 3) + Tag(1, 0) + Varint(1) + Ld(2, "zz") + Tag(15, 4)));
  // Matrix 5 and 6 and request 10, read since the contract grew.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE,
                                   Ld(1, Ld(4, "abcd") + Ld(5, "tensor-7") + Ld(6, Ld(1, "shm"))) +
                                       Ld(10, Tag(1, 0) + Varint(1))));
  // Groups must close with their own number, inside their message.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(5, 3) + Tag(6, 4)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(5, 3)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Tag(5, 3)) + Tag(5, 4)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(5, 3) + std::string(1, '\0')));
  // End-group tags outside a group, tag 0, field 0, wire types 6 and 7.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(5, 4)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Tag(5, 4))));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, std::string(1, '\0')));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(0, 0) + Varint(1)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(7, 6)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(7, 7)));
}

TEST(WireVsProtobuf, GroupsNestAsDeepAsProtobufAllows) {
  // 100 levels at the top, 99 inside a Matrix (which takes one level).
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Groups(9, 100)));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Groups(9, 101)));
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Groups(9, 99))));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Groups(9, 100))));
}

TEST(WireVsProtobuf, VariantMustBeUtf8) {
  for (const char* bad : {"\xc3\x28", "\xed\xa0\x80", "\xc0\xaf", "\xe0\x80\xaf",
                          "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xff", "abc\x80"}) {
    SCOPED_TRACE(Joined({absl::Span<const char>(bad, std::strlen(bad))}));
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_MATMUL, Ld(3, bad)));
    // An invalid variant fails the parse even when a later one is valid.
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_REDUCE, Ld(4, bad) + Ld(4, "cub")));
  }
  for (const std::string& good :
       {std::string("\xc3\xa9t\xc3\xa9"), std::string("\xef\xbf\xbf"),
        std::string("\xf0\x9f\x98\x80"), std::string("\xf4\x8f\xbf\xbf"), std::string("a\0b", 3)}) {
    EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(2, good)));
  }
  // `data` is bytes: anything goes.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(4, "\xff\xfe"))));
}

TEST(WireVsProtobuf, RepeatedFieldsMerge) {
  // The Matrix twice: fields of the first stay unless the second sets them
  // (a zero it sends counts); the later payload wins.
  const std::string bytes =
      Ld(1, Tag(1, 0) + Varint(1) + Tag(2, 0) + Varint(3) + Tag(3, 0) + Varint(4) + Ld(4, "aaaa")) +
      Ld(2, "first") + Ld(1, Tag(2, 0) + Varint(0) + Ld(4, "bbbbbbbb") + Ld(4, "cc")) +
      Ld(2, "second");
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, bytes));
  const std::vector<grpc::Slice> slices = {grpc::Slice(bytes)};  // outlives the parsed spans
  auto req = ParseComputeRequest(v1::OP_TRANSPOSE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->a.dtype, 1);
  EXPECT_EQ(req->a.rows, 0);
  EXPECT_EQ(req->a.cols, 4);
  EXPECT_EQ(Joined(req->a.data), "cc");
  EXPECT_EQ(req->a.data_bytes, 2);
  EXPECT_EQ(req->variant, "second");
}

TEST(WireVsProtobuf, TruncatedAndOverlongFieldsAreRefused) {
  const std::string valid = Ld(1, Tag(1, 0) + Varint(1) + Ld(4, "abcd")) + Ld(2, "v");
  for (size_t cut = 1; cut < valid.size(); ++cut) {
    ExpectSameAsProtobuf(v1::OP_TRANSPOSE, valid.substr(0, cut));
  }
  // A field inside the Matrix that runs past the Matrix's end.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Tag(1, 2) + Varint(3) + Ld(4, "abcd")));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE,
                                    Tag(1, 2) + Varint(2) + Tag(9, 1) + "1234567" + Ld(2, "x")));
}

TEST(WireVsProtobuf, ResponsesMergeTheirReports) {
  v1::ExecutionReport first;
  first.set_variant("cpu_naive");
  first.set_device("cpu");
  first.set_total_us(42);
  const std::string bytes = Ld(2, first.SerializeAsString()) +
                            Ld(1, Tag(2, 0) + Varint(1) + Ld(4, "abcd")) +
                            Ld(2, Tag(7, 0) + Varint(0) + Ld(1, "cub"));
  v1::ReduceResponse pb;
  ASSERT_TRUE(pb.ParseFromString(bytes));
  const std::vector<grpc::Slice> slices = {grpc::Slice(bytes)};  // outlives the parsed spans
  auto resp = ParseComputeResponse(slices);
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->report.SerializeAsString(), pb.report().SerializeAsString());
  EXPECT_EQ(resp->report.variant(), "cub");
  EXPECT_EQ(resp->report.device(), "cpu");
  EXPECT_EQ(resp->report.total_us(), 0);
  EXPECT_EQ(resp->output.rows, 1);
  EXPECT_EQ(Joined(resp->output.data), "abcd");
  // A report that is not valid fails the response, as in protobuf.
  const std::string bad = Ld(2, Ld(1, "\xff"));
  EXPECT_FALSE(pb.ParseFromString(bad));
  EXPECT_FALSE(ParseComputeResponse({grpc::Slice(bad)}).ok());
}

// ---- The payload oneof (Matrix 4 data, 5 tensor_id, 6 shared_memory) and
// OutputPlacement (field 10 of each request). ----

std::string Vi(int number, uint64_t value) { return Tag(number, 0) + Varint(value); }
std::string Shm(const std::string& region, int64_t offset, int64_t byte_size) {
  return Ld(1, region) + Vi(2, uint64_t(offset)) + Vi(3, uint64_t(byte_size));
}

TEST(WireVsProtobuf, PayloadOneofLastMemberWins) {
  const std::string shape = Vi(1, 1) + Vi(2, 2) + Vi(3, 3);
  // Each member after each other one: the last is set, the others are cleared.
  const std::vector<std::string> members = {
      Ld(4, "abcdefgh"), Ld(5, "t-42"), Ld(6, Shm("r", 8, 24)), Ld(4, ""), Ld(5, ""), Ld(6, "")};
  for (const std::string& first : members) {
    for (const std::string& second : members) {
      for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
        EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(1, shape + first + second)));
        // Split across two occurrences of the Matrix: the oneof carries over.
        EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(1, first) + Ld(1, shape + second)));
      }
      EXPECT_TRUE(ExpectSameResponseAsProtobuf(Ld(1, first) + Ld(1, second)));
    }
  }
  const std::string bytes =
      Ld(1, shape + Ld(4, "abcd") + Ld(6, Shm("r", 1, 2)) + Ld(5, "t-1") + Ld(4, "efgh")) +
      Ld(2, Ld(4, "zz") + Ld(5, "t-2"));
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_MATMUL, bytes));
  const std::vector<grpc::Slice> slices = {grpc::Slice(bytes)};  // outlives the parsed spans
  auto req = ParseComputeRequest(v1::OP_MATMUL, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->a.payload, Matrix::Payload::kData);
  EXPECT_EQ(Joined(req->a.data), "efgh");
  EXPECT_EQ(req->a.data_bytes, 4);
  EXPECT_EQ(req->a.tensor_id, "");
  EXPECT_EQ(req->a.shared_memory.region, "");
  EXPECT_EQ(req->b.payload, Matrix::Payload::kTensorId);
  EXPECT_EQ(req->b.tensor_id, "t-2");
  EXPECT_TRUE(req->b.data.empty());
  EXPECT_EQ(req->b.data_bytes, 0);
  // Nothing set: kNone. An empty member still sets its case.
  const std::string empty = Ld(1, shape) + Ld(2, Ld(6, ""));
  const std::vector<grpc::Slice> eslices = {grpc::Slice(empty)};
  auto ereq = ParseComputeRequest(v1::OP_MATMUL, eslices);
  ASSERT_TRUE(ereq.ok()) << ereq.status();
  EXPECT_EQ(ereq->a.payload, Matrix::Payload::kNone);
  EXPECT_EQ(ereq->b.payload, Matrix::Payload::kSharedMemory);
}

TEST(WireVsProtobuf, SharedMemoryMergesOnlyWhileItIsTheMemberSet) {
  // Twice in a row (or in two occurrences of the Matrix): merged, a zero sent
  // counts, the later region wins.
  const std::string merged =
      Ld(1, Ld(6, Shm("r1", 8, 16)) + Ld(6, Vi(2, 0) + Ld(1, "r2"))) + Ld(1, Ld(6, Vi(3, 99)));
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, merged));
  const std::vector<grpc::Slice> slices = {grpc::Slice(merged)};
  auto req = ParseComputeRequest(v1::OP_TRANSPOSE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->a.payload, Matrix::Payload::kSharedMemory);
  EXPECT_EQ(req->a.shared_memory.region, "r2");
  EXPECT_EQ(req->a.shared_memory.offset, 0);
  EXPECT_EQ(req->a.shared_memory.byte_size, 99);
  // After another member: fresh.
  const std::string fresh = Ld(1, Ld(6, Shm("r1", 8, 16)) + Ld(4, "x") + Ld(6, Vi(3, 4)));
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, fresh));
  const std::vector<grpc::Slice> fslices = {grpc::Slice(fresh)};
  auto freq = ParseComputeRequest(v1::OP_TRANSPOSE, fslices);
  ASSERT_TRUE(freq.ok()) << freq.status();
  EXPECT_EQ(freq->a.shared_memory.region, "");
  EXPECT_EQ(freq->a.shared_memory.offset, 0);
  EXPECT_EQ(freq->a.shared_memory.byte_size, 4);
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE,
                                   Ld(1, Ld(6, Shm("r1", 8, 16)) + Ld(5, "t") + Ld(6, Vi(2, 4)))));
  EXPECT_TRUE(ExpectSameResponseAsProtobuf(Ld(1, Ld(6, Shm("a", 1, 2))) + Ld(1, Ld(6, Vi(2, 5)))));
}

TEST(WireVsProtobuf, OutputPlacementIsReadAndMerges) {
  for (v1::Op op : {v1::OP_MATMUL, v1::OP_TRANSPOSE, v1::OP_REDUCE}) {
    SCOPED_TRACE("op " + std::to_string(int(op)));
    EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(10, "")));
    EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(10, Vi(1, 1) + Vi(3, 60))));
    EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(10, Vi(1, 7) + Vi(3, uint64_t(-1)))));
    EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(10, Ld(2, ""))));
    // Twice: fields merge, the slice too.
    EXPECT_TRUE(ExpectSameAsProtobuf(op, Ld(10, Vi(1, 1) + Ld(2, Shm("r", 1, 2))) +
                                             Ld(1, Ld(4, "abcd")) +
                                             Ld(10, Vi(3, 7) + Ld(2, Vi(2, 9)) + Vi(1, 0))));
  }
  const std::string bytes = Ld(1, Ld(5, "t-in")) + Ld(10, Vi(1, 1) + Ld(2, Shm("out", 64, 24))) +
                            Ld(10, Vi(3, 30) + Ld(2, Vi(3, 48)));
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_REDUCE, bytes));
  const std::vector<grpc::Slice> slices = {grpc::Slice(bytes)};
  auto req = ParseComputeRequest(v1::OP_REDUCE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_TRUE(req->has_output);
  EXPECT_TRUE(req->output.keep);
  EXPECT_TRUE(req->output.has_shared_memory);
  EXPECT_EQ(req->output.shared_memory.region, "out");
  EXPECT_EQ(req->output.shared_memory.offset, 64);
  EXPECT_EQ(req->output.shared_memory.byte_size, 48);
  EXPECT_EQ(req->output.ttl_seconds, 30);
  // Absent: has_output false.
  const std::string none = Ld(1, Ld(4, "abcd"));
  const std::vector<grpc::Slice> nslices = {grpc::Slice(none)};
  auto nreq = ParseComputeRequest(v1::OP_TRANSPOSE, nslices);
  ASSERT_TRUE(nreq.ok()) << nreq.status();
  EXPECT_FALSE(nreq->has_output);
  EXPECT_FALSE(nreq->output.has_shared_memory);
}

TEST(WireVsProtobuf, TensorIdAndRegionMustBeUtf8) {
  for (const char* bad : {"\xc3\x28", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "\xff"}) {
    SCOPED_TRACE(Joined({absl::Span<const char>(bad, std::strlen(bad))}));
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(5, bad))));
    // Even when a later member replaces it.
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(5, bad) + Ld(4, "abcd"))));
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_MATMUL, Ld(2, Ld(6, Ld(1, bad)))));
    EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_REDUCE, Ld(10, Ld(2, Ld(1, bad)))));
    EXPECT_FALSE(ExpectSameResponseAsProtobuf(Ld(1, Ld(5, bad))));
    EXPECT_FALSE(ExpectSameResponseAsProtobuf(Ld(1, Ld(6, Ld(1, bad)))));
    // `data` is bytes: anything goes.
    EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(4, bad))));
  }
  EXPECT_TRUE(ExpectSameAsProtobuf(
      v1::OP_TRANSPOSE,
      Ld(1, Ld(5, "\xf0\x9f\x98\x80")) + Ld(10, Ld(2, Ld(1, std::string("a\0\xc3\xa9", 4))))));
}

TEST(WireVsProtobuf, NewFieldsUnderOtherWireTypesAreUnknown) {
  // tensor_id as a varint, shared_memory as fixed32 and as a group, output
  // as a varint, a slice's region as fixed64: skipped, the oneof untouched.
  EXPECT_TRUE(ExpectSameAsProtobuf(
      v1::OP_TRANSPOSE, Ld(1, Ld(4, "ab") + Vi(5, 1) + Tag(6, 5) + "abcd" + Groups(6, 2)) +
                            Vi(10, 1) +
                            Ld(10, Vi(2, 1) + Tag(1, 2) + Varint(0) + Tag(3, 1) + "12345678" +
                                       Ld(2, Tag(1, 1) + "12345678"))));
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_MATMUL, Ld(1, Tag(5, 1) + "12345678" + Ld(6, Vi(1, 3)))));
  EXPECT_TRUE(ExpectSameResponseAsProtobuf(Ld(1, Vi(6, 1) + Vi(5, 2) + Ld(6, Tag(2, 5) + "abcd"))));
  // Field 10 of a response is no OutputPlacement: unknown.
  EXPECT_TRUE(ExpectSameResponseAsProtobuf(Ld(10, Ld(2, Ld(1, "\xff")))));
}

TEST(WireVsProtobuf, NewMessagesNestWithinTheLimit) {
  // A SharedMemorySlice is two levels down in a Matrix or an OutputPlacement:
  // 98 group levels fit in it, 99 do not; 99 in the OutputPlacement itself.
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(6, Groups(9, 98)))));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Ld(6, Groups(9, 99)))));
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_MATMUL, Ld(10, Ld(2, Groups(9, 98)))));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_MATMUL, Ld(10, Ld(2, Groups(9, 99)))));
  EXPECT_TRUE(ExpectSameAsProtobuf(v1::OP_REDUCE, Ld(10, Groups(9, 99))));
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_REDUCE, Ld(10, Groups(9, 100))));
  EXPECT_TRUE(ExpectSameResponseAsProtobuf(Ld(1, Ld(6, Groups(9, 98)))));
  EXPECT_FALSE(ExpectSameResponseAsProtobuf(Ld(1, Ld(6, Groups(9, 99)))));
  // A slice that runs past its Matrix, or is cut short.
  EXPECT_FALSE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, Ld(1, Tag(6, 2) + Varint(5) + Vi(2, 1))));
  const std::string valid =
      Ld(1, Ld(5, "t") + Ld(6, Shm("r", 300, 4))) + Ld(10, Ld(2, Shm("o", 1, 1)));
  for (size_t cut = 1; cut < valid.size(); ++cut) {
    ExpectSameAsProtobuf(v1::OP_TRANSPOSE, valid.substr(0, cut));
  }
}

// Reads a ByteBuffer's bytes back, with its slices.
std::string Bytes(const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices) {
  EXPECT_TRUE(buffer.Dump(slices).ok());
  std::string bytes;
  for (const auto& s : *slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST(Wire, ResponsesWithATensorOrASharedMemorySliceParseBack) {
  v1::ExecutionReport report;
  report.set_variant("tiled32_padded");
  report.set_device("cuda:0 NVIDIA H200");
  report.set_compute_us(77);
  for (const std::string& id : {std::string("t-0123456789abcdef0123456789abcdef"), std::string(""),
                                std::string(300, 'x')}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{64, 32}, {0, 0}, {-1, 1}}) {
      std::vector<grpc::Slice> slices;
      const std::string bytes = Bytes(
          EncodeComputeResponseWithTensor(v1::DTYPE_FLOAT32, rows, cols, id, report), &slices);
      v1::TransposeResponse expected;
      expected.mutable_output()->set_dtype(v1::DTYPE_FLOAT32);
      expected.mutable_output()->set_rows(rows);
      expected.mutable_output()->set_cols(cols);
      expected.mutable_output()->set_tensor_id(id);
      *expected.mutable_report() = report;
      // What protobuf itself writes, byte for byte.
      EXPECT_EQ(Hex(bytes), Hex(expected.SerializeAsString()));
      v1::MatMulResponse pb;
      ASSERT_TRUE(pb.ParseFromString(bytes));
      EXPECT_EQ(pb.c().payload_case(), v1::Matrix::kTensorId);
      EXPECT_EQ(pb.c().tensor_id(), id);
      EXPECT_EQ(pb.c().rows(), rows);
      EXPECT_EQ(pb.c().cols(), cols);
      EXPECT_EQ(pb.report().compute_us(), 77);
      auto read = ParseComputeResponse(slices);
      ASSERT_TRUE(read.ok()) << read.status();
      ExpectSameMatrix(read->output, pb.c());
      EXPECT_EQ(read->report.SerializeAsString(), report.SerializeAsString());
    }
  }
  for (const SharedMemorySlice& slice :
       {SharedMemorySlice{"results", 4096, 64 * 32 * 8}, SharedMemorySlice{},
        SharedMemorySlice{"r\xc3\xa9gion", -1, int64_t(1) << 40}}) {
    std::vector<grpc::Slice> slices;
    const std::string bytes = Bytes(
        EncodeComputeResponseWithSharedMemory(v1::DTYPE_FLOAT64, 64, 32, slice, report), &slices);
    v1::TransposeResponse expected;
    expected.mutable_output()->set_dtype(v1::DTYPE_FLOAT64);
    expected.mutable_output()->set_rows(64);
    expected.mutable_output()->set_cols(32);
    v1::SharedMemorySlice* s = expected.mutable_output()->mutable_shared_memory();
    s->set_region(slice.region);
    s->set_offset(slice.offset);
    s->set_byte_size(slice.byte_size);
    *expected.mutable_report() = report;
    EXPECT_EQ(Hex(bytes), Hex(expected.SerializeAsString()));
    v1::ReduceResponse pb;
    ASSERT_TRUE(pb.ParseFromString(bytes));
    EXPECT_EQ(pb.output().payload_case(), v1::Matrix::kSharedMemory);
    EXPECT_EQ(pb.output().shared_memory().region(), slice.region);
    EXPECT_EQ(pb.output().shared_memory().offset(), slice.offset);
    EXPECT_EQ(pb.output().shared_memory().byte_size(), slice.byte_size);
    EXPECT_TRUE(pb.output().data().empty());
    auto read = ParseComputeResponse(slices);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->output.payload, Matrix::Payload::kSharedMemory);
    ExpectSameMatrix(read->output, pb.output());
  }
}

TEST(Wire, RequestsWithTensorsSharedMemoryAndAnOutputPlacementParseBack) {
  MessageWriter writer;  // MatMulRequest
  writer.MatrixTensorField(1, v1::DTYPE_FLOAT32, 8, 4, "t-a");
  writer.MatrixSharedMemoryField(2, v1::DTYPE_FLOAT32, 4, 2, {"in", 128, 32});
  writer.BytesField(3, "auto");
  writer.OutputPlacementField(10, {.keep = true,
                                   .has_shared_memory = true,
                                   .shared_memory = {"out", 0, 64},
                                   .ttl_seconds = 600});
  std::vector<grpc::Slice> slices;
  const std::string bytes = Bytes(writer.Finish(), &slices);
  v1::MatMulRequest pb;
  ASSERT_TRUE(pb.ParseFromString(bytes));
  EXPECT_EQ(pb.a().tensor_id(), "t-a");
  EXPECT_EQ(pb.a().rows(), 8);
  EXPECT_EQ(pb.b().shared_memory().region(), "in");
  EXPECT_EQ(pb.b().shared_memory().offset(), 128);
  EXPECT_EQ(pb.b().shared_memory().byte_size(), 32);
  EXPECT_TRUE(pb.output().keep());
  EXPECT_EQ(pb.output().shared_memory().region(), "out");
  EXPECT_EQ(pb.output().ttl_seconds(), 600);
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_MATMUL, bytes));
  auto req = ParseComputeRequest(v1::OP_MATMUL, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->a.payload, Matrix::Payload::kTensorId);
  EXPECT_EQ(req->b.payload, Matrix::Payload::kSharedMemory);
  EXPECT_EQ(req->output.shared_memory.byte_size, 64);
  // An empty placement is still present; no shared_memory unless asked for.
  MessageWriter empty;  // TransposeRequest
  empty.OutputPlacementField(10, {.shared_memory = {"ignored", 1, 2}});
  std::vector<grpc::Slice> eslices;
  const std::string ebytes = Bytes(empty.Finish(), &eslices);
  v1::TransposeRequest tr;
  ASSERT_TRUE(tr.ParseFromString(ebytes));
  EXPECT_TRUE(tr.has_output());
  EXPECT_FALSE(tr.output().has_shared_memory());
  ASSERT_TRUE(ExpectSameAsProtobuf(v1::OP_TRANSPOSE, ebytes));
}

}  // namespace
}  // namespace gpucompute::wire
