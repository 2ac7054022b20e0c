// Requests read from slices match protobuf's own parse, however the bytes are
// split; malformed input is refused; responses written around a payload
// slice parse back as the proto messages.
#include <gtest/gtest.h>

#include <random>

#include "wire/compute_wire.h"
#include "support/test_util.h"

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
    std::string gathered(size_t(req->a.data_bytes), '\0');
    Gather(req->a.data, gathered.data());
    EXPECT_EQ(gathered, mm.a().data());
  }
}

TEST(Wire, ReduceAndTransposeFieldsAndUnknownFields) {
  std::mt19937_64 rng(testing::FreshSeed());
  v1::ReduceRequest r;
  *r.mutable_input() = RandomMatrix(7, 9, rng);
  r.set_op(v1::REDUCE_OP_MAX);
  r.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
  r.set_variant("cub");
  // A field this server does not know (number 15, varint) is skipped.
  const std::string bytes = r.SerializeAsString() + std::string("\x78\x2a", 2);
  // The parsed payload points into the slices: they must outlive `req`.
  const std::vector<grpc::Slice> slices = RandomSlices(bytes, rng);
  auto req = ParseComputeRequest(v1::OP_REDUCE, slices);
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->reduce_op, int(v1::REDUCE_OP_MAX));
  EXPECT_EQ(req->reduce_axis, int(v1::REDUCE_AXIS_PER_COLUMN));
  EXPECT_EQ(req->variant, "cub");
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
    grpc::ByteBuffer buffer = EncodeComputeResponse(
        v1::DTYPE_FLOAT64, 6, 4,
        SliceOwning(std::move(payload), [&](std::unique_ptr<std::string> s) {
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

}  // namespace
}  // namespace gpucompute::wire
