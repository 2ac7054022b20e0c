// Dynamic batching over gRPC: small requests of one op, dtype, shape and
// variant that wait together run as one batch. A batched result equals the
// same variant's unbatched result bit for bit, whether the matrices travel in
// the call, sit in tensors or in shared memory; one bad member never fails
// its batch mates; ExecutionReport.batch_size and the batch-size histogram
// say what ran; 64 clients with mixed shapes all get correct answers.
//
// CPU backend by default; GPUCOMPUTE_TEST_BACKEND=cuda runs the same
// tests on a GPU.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/op_requests.h"
#include "support/server_process.h"
#include "support/shm_object.h"
#include "support/shm_requests.h"
#include "support/tensor_client.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::FreshSeed;
using testing::RandomMatrix;

// Concurrent requests of one kind: the batched server runs them as one batch
// once this many are waiting, or after a second.
constexpr int kGroup = 6;

using Request = testing::OpRequest;
using Answer = testing::OpAnswer;

Answer Send(v1::Compute::Stub& stub, const Request& r,
            std::chrono::milliseconds deadline = std::chrono::seconds(60),
            std::chrono::milliseconds cancel_after = std::chrono::milliseconds(0)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  std::future<void> canceller;
  if (cancel_after.count() > 0) {
    canceller = std::async(std::launch::async, [&ctx, cancel_after] {
      std::this_thread::sleep_for(cancel_after);
      ctx.TryCancel();
    });
  }
  return testing::SendOp(stub, r, ctx);
}

// Sends every request at once, each on its own thread.
std::vector<Answer> SendTogether(v1::Compute::Stub& stub, const std::vector<Request>& requests) {
  std::vector<std::future<Answer>> pending;
  for (const Request& r : requests) {
    pending.push_back(std::async(std::launch::async, [&stub, &r] { return Send(stub, r); }));
  }
  std::vector<Answer> answers;
  for (auto& p : pending) answers.push_back(p.get());
  return answers;
}

// Sends `good`, `late` (a 150 ms deadline) and `cancelled` (cancelled by
// the client after 100 ms) at once, each on its own thread, and runs
// `meanwhile` on this one. Expects `late` and `cancelled` to leave with
// those codes; returns the answers to `good`.
std::vector<Answer> SendBesideTwoThatLeave(
    v1::Compute::Stub& stub, const std::vector<Request>& good, const Request& late,
    const Request& cancelled, const std::function<void()>& meanwhile = [] {}) {
  std::vector<std::future<Answer>> pending;
  for (const Request& r : good) {
    pending.push_back(std::async(std::launch::async, [&stub, &r] { return Send(stub, r); }));
  }
  auto late_answer = std::async(std::launch::async,
                                [&] { return Send(stub, late, std::chrono::milliseconds(150)); });
  auto cancelled_answer = std::async(std::launch::async, [&] {
    return Send(stub, cancelled, std::chrono::seconds(60), std::chrono::milliseconds(100));
  });
  meanwhile();
  EXPECT_EQ(late_answer.get().status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(cancelled_answer.get().status.error_code(), grpc::StatusCode::CANCELLED);
  std::vector<Answer> answers;
  for (auto& p : pending) answers.push_back(p.get());
  return answers;
}

// A request of `op` on fresh random data at odd small shapes.
template <typename T>
Request RandomRequest(kernels::Op op, std::mt19937_64& rng, int64_t m = 37, int64_t k = 19,
                      int64_t n = 23) {
  Request r;
  r.op = op;
  r.a = RandomMatrix<T>(m, k, rng);
  if (op == kernels::Op::kMatMul) r.b = RandomMatrix<T>(k, n, rng);
  return r;
}

// The same in any dtype.
Request RandomRequestOf(v1::DType dtype, kernels::Op op, std::mt19937_64& rng) {
  Request r;
  r.op = op;
  r.a = testing::RandomMatrixOf(dtype, 37, 19, rng);
  if (op == kernels::Op::kMatMul) r.b = testing::RandomMatrixOf(dtype, 19, 23, rng);
  return r;
}

// The server's variants that take float32, each with its op.
std::vector<std::pair<std::string, kernels::Op>> Float32Variants(v1::Compute::Stub& stub) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub.GetServerInfo(&ctx, v1::ServerInfoRequest(), &info).ok());
  std::vector<std::pair<std::string, kernels::Op>> out;
  for (const v1::VariantInfo& v : info.variants()) {
    if (std::find(v.dtypes().begin(), v.dtypes().end(), v1::DTYPE_FLOAT32) == v.dtypes().end())
      continue;
    out.emplace_back(v.name(), v.op() == v1::OP_MATMUL      ? kernels::Op::kMatMul
                               : v.op() == v1::OP_TRANSPOSE ? kernels::Op::kTranspose
                                                            : kernels::Op::kReduce);
  }
  return out;
}

// How many streams the server says a batch's members ran side by side on
// ("... replayed from a CUDA graph on N streams"); 0 when it does not say.
int StreamsSideBySide(const v1::ExecutionReport& report) {
  const std::string& device = report.device();
  const std::string said = "replayed from a CUDA graph on ";
  const size_t at = device.find(said);
  if (at == std::string::npos) return 0;
  return std::atoi(device.c_str() + at + said.size());
}

std::vector<double> Reference(const Request& r) {
  kernels::Problem p = testing::ProblemOf(r.op, r.a, r.op == kernels::Op::kMatMul ? &r.b : nullptr);
  p.reduce_op = *server::FromProto(r.reduce_op);
  p.reduce_axis = *server::FromProto(r.axis);
  return kernels::ReferenceResult(p, r.a.data().data(),
                                  r.op == kernels::Op::kMatMul ? r.b.data().data() : nullptr);
}

class BatchingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    batched_ = new testing::ServerWithMetrics(testing::StartServerWithMetrics(
        GPUCOMPUTE_SERVER_PATH,
        {testing::BackendFlag(), "--cpu_workers=1", absl::StrCat("--max_batch_size=", kGroup),
         "--batch_delay_us=1000000", "--allow_shared_memory"}));
    alone_ = new testing::ServerProcess(
        GPUCOMPUTE_SERVER_PATH,
        {testing::BackendFlag(), "--max_batch_size=1", "--metrics_listen="});
  }
  static void TearDownTestSuite() {
    delete batched_;
    delete alone_;
  }
  void SetUp() override {
    ASSERT_TRUE(batched_->started());
    ASSERT_TRUE(alone_->started());
    batched_stub_ = v1::Compute::NewStub(Connect(batched_->process->target()));
    alone_stub_ = v1::Compute::NewStub(Connect(alone_->target()));
  }

  static testing::ServerWithMetrics* batched_;
  static testing::ServerProcess* alone_;
  std::unique_ptr<v1::Compute::Stub> batched_stub_, alone_stub_;
  std::mt19937_64 rng_{FreshSeed()};
};
testing::ServerWithMetrics* BatchingTest::batched_ = nullptr;
testing::ServerProcess* BatchingTest::alone_ = nullptr;

// Every op and dtype and every variant that takes them: kGroup requests sent
// together to the batching server equal, byte for byte, what the same
// variant returns for each alone.
TEST_F(BatchingTest, BatchedResultsEqualUnbatchedBitForBit) {
  grpc::ClientContext info_ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(batched_stub_->GetServerInfo(&info_ctx, v1::ServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.max_batch_size(), kGroup);
  EXPECT_EQ(info.batch_delay_us(), 1000000);
  struct Kind {
    kernels::Op op;
    v1::Op proto_op;
    v1::ReduceOp reduce_op;
    v1::ReduceAxis axis;
  };
  const std::vector<Kind> kinds = {
      {kernels::Op::kMatMul, v1::OP_MATMUL, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL},
      {kernels::Op::kTranspose, v1::OP_TRANSPOSE, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL},
      {kernels::Op::kReduce, v1::OP_REDUCE, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL},
      {kernels::Op::kReduce, v1::OP_REDUCE, v1::REDUCE_OP_MEAN, v1::REDUCE_AXIS_PER_ROW},
      {kernels::Op::kReduce, v1::OP_REDUCE, v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_PER_COLUMN},
  };
  int combinations = 0;
  for (const Kind& kind : kinds) {
    for (const v1::VariantInfo& variant : info.variants()) {
      if (variant.op() != kind.proto_op) continue;
      for (int dtype_number : variant.dtypes()) {
        const auto dtype = static_cast<v1::DType>(dtype_number);
        SCOPED_TRACE(absl::StrCat(variant.name(), " ", v1::DType_Name(dtype), " ",
                                  v1::ReduceOp_Name(kind.reduce_op), " ",
                                  v1::ReduceAxis_Name(kind.axis)));
        std::vector<Request> group;
        for (int i = 0; i < kGroup; ++i) {
          Request r = RandomRequestOf(dtype, kind.op, rng_);
          r.reduce_op = kind.reduce_op;
          r.axis = kind.axis;
          r.variant = variant.name();
          group.push_back(std::move(r));
        }
        const std::vector<Answer> batched = SendTogether(*batched_stub_, group);
        int largest = 0;
        for (int i = 0; i < kGroup; ++i) {
          ASSERT_TRUE(batched[i].status.ok()) << batched[i].status.error_message();
          const Answer alone = Send(*alone_stub_, group[i]);
          ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
          EXPECT_EQ(alone.report.batch_size(), 1);
          EXPECT_EQ(batched[i].report.variant(), variant.name());
          EXPECT_EQ(batched[i].output.rows(), alone.output.rows());
          EXPECT_EQ(batched[i].output.cols(), alone.output.cols());
          EXPECT_TRUE(batched[i].output.data() == alone.output.data()) << "request " << i;
          // A 16-bit result is rounded to 8 (BF16) or 11 (FP16) bits.
          EXPECT_LE(testing::MaxError(batched[i].output, Reference(group[i])), 1e-2);
          largest = std::max(largest, batched[i].report.batch_size());
        }
        EXPECT_GT(largest, 1) << "no request of the group ran in a batch";
        // On a GPU a batch's graph runs its members as one kernel launch
        // where the variant has a batched form (the CUDA-core MatMuls, the
        // Transposes of 4- and 8-byte elements, and warp_shuffle's Reduces
        // of one pass, as all of these are), else side by side on several
        // streams. cuBLAS's members share the slot's one workspace
        // (32 MiB), so its batch's graph runs them one after another on one
        // stream.
        if (testing::TestBackend() == "cuda") {
          int widest = 0;
          bool one_stream = false, one_launch = false;
          for (const Answer& a : batched) {
            widest = std::max(widest, StreamsSideBySide(a.report));
            one_stream |= a.report.device().find(
                              "the batch replayed from a CUDA graph on one "
                              "stream") != std::string::npos;
            one_launch |= a.report.device().find(
                              "the batch replayed from a CUDA graph as one kernel "
                              "launch") != std::string::npos;
          }
          std::printf("%s %s: %s\n", variant.name().c_str(), v1::DType_Name(dtype).c_str(),
                      batched.front().report.device().c_str());
          const bool cublas = variant.name().rfind("cublas", 0) == 0;
          const bool two_byte = dtype == v1::DTYPE_FLOAT16 || dtype == v1::DTYPE_BFLOAT16;
          if (kind.op == kernels::Op::kMatMul && cublas) {
            EXPECT_TRUE(one_stream) << batched.front().report.device();
          } else if ((kind.op == kernels::Op::kMatMul &&
                      (variant.name() == "naive" || variant.name().rfind("tiled", 0) == 0 ||
                       variant.name() == "register_tiled")) ||
                     (kind.op == kernels::Op::kTranspose && !cublas && !two_byte) ||
                     (kind.op == kernels::Op::kReduce && variant.name() == "warp_shuffle")) {
            EXPECT_TRUE(one_launch) << batched.front().report.device();
          } else {
            EXPECT_GT(widest, 1) << batched.front().report.device();
          }
        }
        ++combinations;
      }
    }
  }
  EXPECT_GE(combinations, 20);  // 5 kinds, 4 dtypes on the CPU
}

// Requests that read tensors and keep their results batch too (everything
// on one device): for every float32 variant of each op, kGroup sent
// together run as one batch, and each kept tensor holds, byte for byte,
// what the same variant returns for the same inputs sent inline, alone.
TEST_F(BatchingTest, KeptResultsOnTensorsBatchBitForBit) {
  int variants = 0;
  for (const auto& [name, op] : Float32Variants(*batched_stub_)) {
    SCOPED_TRACE(name);
    std::vector<Request> inline_group, tensor_group;
    std::vector<std::string> ids;
    for (int i = 0; i < kGroup; ++i) {
      Request r = RandomRequestOf(v1::DTYPE_FLOAT32, op, rng_);
      r.variant = name;
      r.axis = v1::REDUCE_AXIS_PER_COLUMN;
      Request t = r;
      t.keep = true;
      for (auto [in, out] : {std::pair{&r.a, &t.a}, std::pair{&r.b, &t.b}}) {
        if (in->rows() == 0) continue;
        v1::TensorInfo tensor;
        ASSERT_TRUE(testing::UploadBytes(*batched_stub_, in->dtype(), in->rows(), in->cols(),
                                         in->data(), {1 << 20}, &tensor)
                        .ok());
        *out = testing::TensorMatrix(tensor.id());
        ids.push_back(tensor.id());
      }
      inline_group.push_back(std::move(r));
      tensor_group.push_back(std::move(t));
    }
    const std::vector<Answer> batched = SendTogether(*batched_stub_, tensor_group);
    int largest = 0;
    for (int i = 0; i < kGroup; ++i) {
      ASSERT_TRUE(batched[i].status.ok()) << batched[i].status.error_message();
      ASSERT_EQ(batched[i].output.payload_case(), v1::Matrix::kTensorId);
      EXPECT_EQ(batched[i].report.upload_us(), 0);
      EXPECT_EQ(batched[i].report.download_us(), 0);
      largest = std::max(largest, batched[i].report.batch_size());
      std::string kept;
      ASSERT_TRUE(
          testing::DownloadBytes(*batched_stub_, batched[i].output.tensor_id(), &kept).ok());
      ids.push_back(batched[i].output.tensor_id());
      const Answer alone = Send(*alone_stub_, inline_group[i]);
      ASSERT_TRUE(alone.status.ok()) << alone.status.error_message();
      EXPECT_TRUE(kept == alone.output.data()) << "request " << i;
      v1::Matrix got = alone.output;
      got.set_data(kept);
      EXPECT_LE(testing::MaxError(got, Reference(inline_group[i])), 1e-3) << "request " << i;
    }
    EXPECT_GT(largest, 1) << "no request of the group ran in a batch";
    // On a GPU the variants with a batched form run such a batch as one
    // kernel launch (float32 tensors are aligned, so every member takes
    // the same path; a 37 x 19 Reduce is one pass); the others launch each
    // member.
    if (testing::TestBackend() == "cuda") {
      const bool one_launch_form =
          op == kernels::Op::kReduce ? name == "warp_shuffle" : name.rfind("cublas", 0) != 0;
      bool one_launch = false;
      for (const Answer& a : batched) {
        if (a.report.batch_size() < 2) continue;
        one_launch |=
            a.report.device().find("the batch ran as one kernel launch") != std::string::npos;
      }
      std::printf("%s: %s\n", name.c_str(), batched.front().report.device().c_str());
      EXPECT_EQ(one_launch, one_launch_form) << batched.front().report.device();
    }
    testing::ReleaseTensors(*batched_stub_, ids);
    ++variants;
  }
  EXPECT_GE(variants, 3);
}

// Requests on shared memory batch too, when their slices are copied
// through the region's file (smaller than the DMA threshold): for every
// float32 variant, kGroup sent together, inputs and result in one region,
// run as one batch, and each result slice holds, byte for byte, what the
// same variant returns for the same inputs sent inline, alone.
TEST_F(BatchingTest, RequestsOnSharedMemoryBatchBitForBit) {
  // Each request's a, b and result, 4 KiB apart (the largest is 37 x 23 x 4 bytes).
  constexpr int64_t kStride = 4096;
  testing::ShmObject object(3 * kGroup * kStride);
  ASSERT_TRUE(object.ok());
  {
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryRequest req;
    req.set_name("batch");
    req.set_key(object.key());
    req.set_byte_size(object.bytes());
    v1::SharedMemoryRegion region;
    grpc::Status s = batched_stub_->RegisterSharedMemory(&ctx, req, &region);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // The bytes of `m` written at slice `at` of the region, named there.
  auto place = [&](const v1::Matrix& m, int64_t at) {
    std::memcpy(object.data() + at, m.data().data(), m.data().size());
    return testing::SliceMatrix(m.dtype(), m.rows(), m.cols(), "batch", at,
                                int64_t(m.data().size()));
  };
  int variants = 0;
  for (const auto& [name, op] : Float32Variants(*batched_stub_)) {
    SCOPED_TRACE(name);
    std::vector<Request> on_shm;
    std::vector<Answer> alone;
    for (int i = 0; i < kGroup; ++i) {
      Request r = RandomRequestOf(v1::DTYPE_FLOAT32, op, rng_);
      r.variant = name;
      r.axis = v1::REDUCE_AXIS_PER_COLUMN;
      alone.push_back(Send(*alone_stub_, r));
      ASSERT_TRUE(alone.back().status.ok()) << alone.back().status.error_message();
      const int64_t at = 3 * i * kStride;
      Request s = r;
      s.a = place(r.a, at);
      if (op == kernels::Op::kMatMul) s.b = place(r.b, at + kStride);
      testing::SetSlice(&s.out_slice, "batch", at + 2 * kStride,
                        int64_t(alone.back().output.data().size()));
      on_shm.push_back(std::move(s));
    }
    const std::vector<Answer> batched = SendTogether(*batched_stub_, on_shm);
    int largest = 0;
    for (int i = 0; i < kGroup; ++i) {
      ASSERT_TRUE(batched[i].status.ok()) << batched[i].status.error_message();
      EXPECT_EQ(batched[i].output.payload_case(), v1::Matrix::kSharedMemory);
      largest = std::max(largest, batched[i].report.batch_size());
      const std::string& expected = alone[i].output.data();
      const std::string got(object.data() + 3 * i * kStride + 2 * kStride, expected.size());
      EXPECT_TRUE(got == expected) << "request " << i;
    }
    EXPECT_GT(largest, 1) << "no request of the group ran in a batch";
    ++variants;
  }
  EXPECT_GE(variants, 3);
  grpc::ClientContext ctx;
  v1::UnregisterSharedMemoryRequest req;
  req.set_name("batch");
  v1::UnregisterSharedMemoryResponse resp;
  EXPECT_TRUE(batched_stub_->UnregisterSharedMemory(&ctx, req, &resp).ok());
}

// In one batch: a member whose deadline passes while it waits, one the client
// cancels, and, beside them, a request naming no variant the server has. The
// others succeed, together and correctly.
TEST_F(BatchingTest, ABadMemberNeverFailsItsBatchMates) {
  std::vector<Request> good;
  for (int i = 0; i < 3; ++i) {
    good.push_back(RandomRequest<float>(kernels::Op::kTranspose, rng_));
    good.back().variant = "cpu_reference";
  }
  if (testing::TestBackend() != "cpu") {
    // A named variant, not auto: auto calibrates the first request of a new
    // shape at once, alone, which would let `late` run before its deadline.
    for (Request& r : good) r.variant = "shared_padded";
  }
  Request late = RandomRequest<float>(kernels::Op::kTranspose, rng_);
  late.variant = good.front().variant;
  Request cancelled = late;
  Request unknown = late;
  unknown.variant = "no_such_variant";

  const std::vector<Answer> answers =
      SendBesideTwoThatLeave(*batched_stub_, good, late, cancelled, [&] {
        const Answer refused = Send(*batched_stub_, unknown);
        EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
        EXPECT_NE(refused.status.error_message().find("no_such_variant"), std::string::npos)
            << refused.status.error_message();
      });
  int largest = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    const Answer& a = answers[i];
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(testing::MaxError(a.output, Reference(good[i])), 0.0);
    largest = std::max(largest, a.report.batch_size());
  }
  EXPECT_GT(largest, 1);
}

// The same with tensors read and results kept (a batch on the device): the
// members that leave list no tensor, the others each list theirs with the
// right bytes, and once those and the inputs are released the server holds
// what it held before.
TEST_F(BatchingTest, MembersThatLeaveAKeptBatchListNoTensor) {
  const int before = testing::ListTensors(*batched_stub_).tensors_size();
  const std::string variant = testing::TestBackend() == "cpu" ? "cpu_reference" : "shared_padded";
  std::vector<std::string> ids;
  // A Transpose on a tensor holding fresh random bytes, its result kept;
  // `inline_request` gets the same request with the bytes inline.
  auto on_tensor = [&](Request* inline_request) {
    *inline_request = RandomRequest<float>(kernels::Op::kTranspose, rng_);
    inline_request->variant = variant;
    const v1::Matrix& a = inline_request->a;
    v1::TensorInfo tensor;
    EXPECT_TRUE(testing::UploadBytes(*batched_stub_, a.dtype(), a.rows(), a.cols(), a.data(),
                                     {1 << 20}, &tensor)
                    .ok());
    ids.push_back(tensor.id());
    Request r = *inline_request;
    r.a = testing::TensorMatrix(tensor.id());
    r.keep = true;
    return r;
  };
  std::vector<Request> inline_good(3), good;
  for (Request& r : inline_good) good.push_back(on_tensor(&r));
  Request unused;
  const Request late = on_tensor(&unused);
  const Request cancelled = on_tensor(&unused);

  const std::vector<Answer> answers = SendBesideTwoThatLeave(*batched_stub_, good, late, cancelled);
  int largest = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    const Answer& a = answers[i];
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    ASSERT_EQ(a.output.payload_case(), v1::Matrix::kTensorId);
    ids.push_back(a.output.tensor_id());
    v1::Matrix got = inline_good[i].a;
    std::string bytes;
    ASSERT_TRUE(testing::DownloadBytes(*batched_stub_, a.output.tensor_id(), &bytes).ok());
    got.set_rows(a.output.rows());
    got.set_cols(a.output.cols());
    got.set_data(bytes);
    EXPECT_EQ(testing::MaxError(got, Reference(inline_good[i])), 0.0) << "request " << i;
    largest = std::max(largest, a.report.batch_size());
  }
  EXPECT_GT(largest, 1);
  // 5 inputs and 3 results: nothing of the two that left.
  EXPECT_EQ(testing::ListTensors(*batched_stub_).tensors_size(), before + 8);
  testing::ReleaseTensors(*batched_stub_, ids);
  EXPECT_EQ(testing::ListTensors(*batched_stub_).tensors_size(), before);
}

// The histogram counts each successful compute request once, at the batch
// size its report gave.
TEST_F(BatchingTest, HistogramAndReportsAgree) {
  auto before = testing::ScrapeMetrics(batched_->metrics_port);
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<Request> requests;
  for (int i = 0; i < 2 * kGroup; ++i) {
    requests.push_back(RandomRequest<double>(kernels::Op::kReduce, rng_, 5, 9));
  }
  int64_t reported = 0;
  for (const Answer& a : SendTogether(*batched_stub_, requests)) {
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_GE(a.report.batch_size(), 1);
    reported += a.report.batch_size();
  }
  auto after = testing::ScrapeMetricsSettled(batched_->metrics_port);
  ASSERT_TRUE(after.ok()) << after.status();
  const std::map<std::string, std::string> reduce = {{"op", "reduce"}};
  EXPECT_EQ(after->Sum("gpucompute_request_batch_size_count", reduce) -
                before->Sum("gpucompute_request_batch_size_count", reduce),
            double(requests.size()));
  EXPECT_EQ(after->Sum("gpucompute_request_batch_size_sum", reduce) -
                before->Sum("gpucompute_request_batch_size_sum", reduce),
            double(reported));
  EXPECT_GT(reported, int64_t(requests.size())) << "nothing ran in a batch";
}

// 64 clients, each sending requests of mixed ops and shapes (few enough
// shapes that batches form) to a server holding each batch 2 ms for
// company: every answer is right, and batches did form. (Without a delay a
// CPU server keeps up with these tiny requests: nothing waits, nothing
// batches.)
TEST(BatchingLoad, SixtyFourClientsWithMixedShapes) {
  testing::ServerWithMetrics server = testing::StartServerWithMetrics(
      GPUCOMPUTE_SERVER_PATH,
      {testing::BackendFlag(), "--max_batch_size=16", "--batch_delay_us=2000"});
  ASSERT_TRUE(server.started());
  constexpr int kClients = 64, kEach = 8;
  const uint64_t seed = FreshSeed();
  std::atomic<int> wrong{0};
  std::vector<std::future<std::string>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c]() -> std::string {
      auto stub = v1::Compute::NewStub(Connect(server.process->target()));
      std::mt19937_64 rng(seed + c);
      for (int i = 0; i < kEach; ++i) {
        const int shape = int(rng() % 2);
        Request r;
        switch (rng() % 3) {
          case 0: r = RandomRequest<float>(kernels::Op::kMatMul, rng, 9 + shape, 7, 5); break;
          case 1: r = RandomRequest<double>(kernels::Op::kTranspose, rng, 11, 3 + shape); break;
          default:
            r = RandomRequest<float>(kernels::Op::kReduce, rng, 13 + shape, 17);
            r.axis = v1::REDUCE_AXIS_PER_ROW;
        }
        const Answer a = Send(*stub, r);
        if (!a.status.ok()) return a.status.error_message();
        const double err = testing::MaxError(a.output, Reference(r));
        if (err > 1e-4) {
          ++wrong;
          return absl::StrCat("client ", c, " request ", i, ": error ", err);
        }
      }
      return "";
    }));
  }
  for (auto& c : clients) EXPECT_EQ(c.get(), "");
  EXPECT_EQ(wrong.load(), 0);
  auto scrape = testing::ScrapeMetricsSettled(server.metrics_port);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const double count = scrape->Sum("gpucompute_request_batch_size_count");
  EXPECT_EQ(count, double(kClients * kEach));
  EXPECT_GT(scrape->Sum("gpucompute_request_batch_size_sum"), count)
      << "64 clients and no request ever ran in a batch";
}

// Without --max_batch_size, a CUDA server batches (up to 16) and a CPU one
// does not: its batches would run one after another on one thread.
TEST(BatchingCommandLine, TheDefaultBatchesOnTheGpuOnly) {
  testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                                {testing::BackendFlag(), "--metrics_listen="});
  ASSERT_TRUE(server.started());
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&ctx, v1::ServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.max_batch_size(), testing::TestBackend() == "cuda" ? 16 : 1);
  EXPECT_EQ(info.batch_delay_us(), 0);
}

TEST(BatchingCommandLine, BadBatchFlagsStopStartUp) {
  for (const std::string flag : {"--max_batch_size=-1", "--max_batch_size=257",
                                 "--batch_delay_us=-1", "--batch_delay_us=2000000"}) {
    testing::ServerProcess server(GPUCOMPUTE_SERVER_PATH,
                                  {"--backend=cpu", "--metrics_listen=", flag});
    EXPECT_FALSE(server.started()) << flag;
  }
}

}  // namespace
}  // namespace gpucompute
