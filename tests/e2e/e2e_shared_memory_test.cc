// End to end over loopback: shared-memory regions. Ops read their operands
// from registered regions and write results into them, Upload and Download
// use them, every Part 2 status row of shared memory, slices at a region's
// edges and one byte past, a region unregistered while ops use it, an object
// truncated, unlinked or rewritten while registered (the server lives, other
// clients are unaffected), and 16 clients each with their own region.
// Results are checked against the float64 reference.
//
// CPU backend by default (regions read and written through their files);
// GPUCOMPUTE_TEST_BACKEND=cuda runs the same tests on a GPU, where
// regions are pinned and the device copies by DMA.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/metrics_scrape.h"
#include "support/server_process.h"
#include "support/shm_object.h"
#include "support/shm_requests.h"
#include "support/tensor_client.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::Connect;
using testing::ElementSize;
using testing::FillRandom;
using testing::Inline;
using testing::SetDeadline;
using testing::SetSlice;
using testing::ShmObject;
using testing::SliceMatrix;

constexpr int64_t kMiB = int64_t{1} << 20;

#define EXPECT_CODE(status, code, needle)                                                \
  do {                                                                                   \
    const grpc::Status s_ = (status);                                                    \
    EXPECT_EQ(s_.error_code(), grpc::StatusCode::code) << s_.error_message();            \
    EXPECT_NE(s_.error_message().find(needle), std::string::npos) << s_.error_message(); \
  } while (0)

class SharedMemoryTest : public testing::SeededStubTest {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerWithMetrics(testing::StartServerWithMetrics(
        GPUCOMPUTE_SERVER_PATH, {testing::BackendFlag(), "--cpu_workers=4", "--allow_shared_memory",
                                 "--shared_memory_max_regions=40"}));
    ASSERT_TRUE(server_->started()) << "server did not start";
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ConnectTo(target());
  }
  void TearDown() override {
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryResponse r;
    EXPECT_TRUE(stub_->UnregisterSharedMemory(&ctx, {}, &r).ok());
  }

  grpc::Status Register(const std::string& name, const std::string& key, int64_t offset,
                        int64_t bytes, v1::SharedMemoryRegion* out = nullptr) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    v1::RegisterSharedMemoryRequest req;
    req.set_name(name);
    req.set_key(key);
    req.set_offset(offset);
    req.set_byte_size(bytes);
    v1::SharedMemoryRegion region;
    grpc::Status s = stub_->RegisterSharedMemory(&ctx, req, &region);
    if (out != nullptr) *out = region;
    return s;
  }

  grpc::Status Unregister(const std::string& name, int64_t* count = nullptr) {
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryRequest req;
    req.set_name(name);
    v1::UnregisterSharedMemoryResponse resp;
    grpc::Status s = stub_->UnregisterSharedMemory(&ctx, req, &resp);
    if (count != nullptr) *count = resp.unregistered();
    return s;
  }

  // Transpose rows x cols from `in` at `in_at` into `out` at `out_at`.
  grpc::Status TransposeShm(const std::string& in, int64_t in_at, const std::string& out,
                            int64_t out_at, v1::DType dtype, int64_t rows, int64_t cols,
                            v1::TransposeResponse* resp) {
    const int64_t bytes = rows * cols * ElementSize(dtype);
    v1::TransposeRequest req;
    *req.mutable_input() = SliceMatrix(dtype, rows, cols, in, in_at, bytes);
    SetSlice(req.mutable_output()->mutable_shared_memory(), out, out_at, bytes);
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    return stub_->Transpose(&ctx, req, resp);
  }

  static const std::string& target() { return server_->process->target(); }
  static testing::ServerWithMetrics* server_;
};
testing::ServerWithMetrics* SharedMemoryTest::server_ = nullptr;

TEST_F(SharedMemoryTest, RegisterListUnregisterAndTheirStatusRows) {
  ShmObject object(1 * kMiB);
  ASSERT_TRUE(object.ok());
  v1::SharedMemoryRegion region;
  ASSERT_TRUE(Register("r1", object.key(), 4096, 64 * 1024, &region).ok());
  EXPECT_EQ(region.name(), "r1");
  EXPECT_EQ(region.key(), object.key());
  EXPECT_EQ(region.offset(), 4096);
  EXPECT_EQ(region.byte_size(), 64 * 1024);
  EXPECT_EQ(region.pinned(), testing::TestBackend() == "cuda");
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
    EXPECT_TRUE(info.shared_memory_allowed());
  }
  // A name taken; an object missing; a region past the object's end; bad
  // keys, offsets and sizes.
  EXPECT_CODE(Register("r1", object.key(), 0, 16), ALREADY_EXISTS, "\"r1\"");
  EXPECT_CODE(Register("r2", "/gpucompute-test-no-such-object", 0, 16), NOT_FOUND,
              "/gpucompute-test-no-such-object");
  EXPECT_CODE(Register("r2", object.key(), 1 * kMiB - 8, 9), INVALID_ARGUMENT,
              absl::StrCat("of ", 1 * kMiB, " bytes"));
  EXPECT_CODE(Register("r2", "no-slash", 0, 16), INVALID_ARGUMENT, "key");
  EXPECT_CODE(Register("r2", "/a/b", 0, 16), INVALID_ARGUMENT, "key");
  EXPECT_CODE(Register("r2", object.key(), -1, 16), INVALID_ARGUMENT, "offset");
  EXPECT_CODE(Register("r2", object.key(), 0, 0), INVALID_ARGUMENT, "byte_size");
  EXPECT_CODE(Register("", object.key(), 0, 16), INVALID_ARGUMENT, "name");
  if (geteuid() != 0) {  // root opens anything
    ShmObject locked(4096);
    ASSERT_EQ(fchmod(locked.fd(), 0), 0);
    EXPECT_CODE(Register("r3", locked.key(), 0, 16), PERMISSION_DENIED, locked.key());
  }
  // The same object again under another name, at an unaligned offset.
  ASSERT_TRUE(Register("r2", object.key(), 1000, 24).ok());
  {
    grpc::ClientContext ctx;
    v1::ListSharedMemoryResponse list;
    ASSERT_TRUE(stub_->ListSharedMemory(&ctx, {}, &list).ok());
    ASSERT_EQ(list.regions_size(), 2);
    EXPECT_EQ(list.regions(0).name(), "r1");
    EXPECT_EQ(list.regions(1).offset(), 1000);
  }
  {
    auto scrape = testing::ScrapeMetrics(server_->metrics_port);
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    EXPECT_EQ(scrape->Sum("gpucompute_shared_memory_regions"), 2);
    EXPECT_EQ(scrape->Sum("gpucompute_shared_memory_registered_bytes"), 64 * 1024 + 24);
    EXPECT_EQ(scrape->Sum("gpucompute_shared_memory_pinned_bytes"),
              testing::TestBackend() == "cuda" ? 64 * 1024 + 24 : 0);
  }
  int64_t count = 0;
  EXPECT_CODE(Unregister("nope"), NOT_FOUND, "\"nope\"");
  ASSERT_TRUE(Unregister("r1", &count).ok());
  EXPECT_EQ(count, 1);
  ASSERT_TRUE(Unregister("", &count).ok());
  EXPECT_EQ(count, 1);
  // The bound on regions.
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(Register(absl::StrCat("n", i), object.key(), 0, 8).ok());
  EXPECT_CODE(Register("n40", object.key(), 0, 8), RESOURCE_EXHAUSTED,
              "--shared_memory_max_regions");
}

// Every op and dtype at odd shapes, inputs and outputs in regions at
// unaligned offsets, against the float64 reference.
TEST_F(SharedMemoryTest, OpsReadAndWriteRegions) {
  ShmObject object(8 * kMiB);
  ASSERT_TRUE(object.ok());
  ASSERT_TRUE(Register("in", object.key(), 0, 4 * kMiB).ok());
  ASSERT_TRUE(Register("out", object.key(), 4 * kMiB + 8, 4 * kMiB - 8).ok());
  char* in = object.data();
  char* out = object.data() + 4 * kMiB + 8;
  for (v1::DType dtype : {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64}) {
    const int64_t es = ElementSize(dtype);
    SCOPED_TRACE(absl::StrCat("dtype ", dtype, " ", SeedNote()));
    {  // MatMul 37x23 @ 23x19, b right after a, the result at offset 16.
      const int64_t m = 37, k = 23, n = 19, b_at = 8 + m * k * es;
      FillRandom(in + 8, dtype, m * k, rng_);
      FillRandom(in + b_at, dtype, k * n, rng_);
      v1::MatMulRequest req;
      *req.mutable_a() = SliceMatrix(dtype, m, k, "in", 8, m * k * es);
      *req.mutable_b() = SliceMatrix(dtype, k, n, "in", b_at, k * n * es);
      SetSlice(req.mutable_output()->mutable_shared_memory(), "out", 16, m * n * es);
      std::memset(out + 16, 0x7f, size_t(m * n * es));
      grpc::ClientContext ctx;
      v1::MatMulResponse resp;
      grpc::Status s = stub_->MatMul(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_TRUE(resp.c().data().empty());
      EXPECT_EQ(resp.c().shared_memory().region(), "out");
      EXPECT_EQ(resp.c().shared_memory().offset(), 16);
      EXPECT_EQ(resp.c().rows(), m);
      EXPECT_EQ(resp.c().cols(), n);
      kernels::Problem p;
      p.op = kernels::Op::kMatMul;
      p.dtype = dtype == v1::DTYPE_FLOAT32 ? kernels::DType::kFloat32 : kernels::DType::kFloat64;
      p.m = m;
      p.k = k;
      p.n = n;
      EXPECT_LT(testing::MaxError(Inline(dtype, m, n, out + 16),
                                  kernels::ReferenceResult(p, in + 8, in + b_at)),
                dtype == v1::DTYPE_FLOAT32 ? 1e-4 : 1e-12);
    }
    {  // Transpose 301x257, exact.
      const int64_t rows = 301, cols = 257;
      FillRandom(in + 3 * es, dtype, rows * cols, rng_);
      v1::TransposeResponse resp;
      grpc::Status s = TransposeShm("in", 3 * es, "out", 0, dtype, rows, cols, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      for (int64_t r = 0; r < rows; r += 13) {
        for (int64_t c = 0; c < cols; c += 7) {
          ASSERT_EQ(
              std::memcmp(out + (c * rows + r) * es, in + 3 * es + (r * cols + c) * es, size_t(es)),
              0)
              << r << "," << c;
        }
      }
    }
    {  // Reduce per column of 129x65: input in a region, result inline.
      const int64_t rows = 129, cols = 65;
      FillRandom(in, dtype, rows * cols, rng_);
      v1::ReduceRequest req;
      *req.mutable_input() = SliceMatrix(dtype, rows, cols, "in", 0, rows * cols * es);
      req.set_op(v1::REDUCE_OP_SUM);
      req.set_axis(v1::REDUCE_AXIS_PER_COLUMN);
      grpc::ClientContext ctx;
      v1::ReduceResponse resp;
      grpc::Status s = stub_->Reduce(&ctx, req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      kernels::Problem p;
      p.op = kernels::Op::kReduce;
      p.dtype = dtype == v1::DTYPE_FLOAT32 ? kernels::DType::kFloat32 : kernels::DType::kFloat64;
      p.m = rows;
      p.n = cols;
      p.reduce_op = kernels::ReduceOp::kSum;
      p.reduce_axis = kernels::ReduceAxis::kPerColumn;
      EXPECT_LT(testing::MaxError(resp.output(), kernels::ReferenceResult(p, in, nullptr)),
                dtype == v1::DTYPE_FLOAT32 ? 1e-4 : 1e-12);
    }
  }
}

TEST_F(SharedMemoryTest, SlicesAtTheEdgesAndOneBytePast) {
  ShmObject object(64 * 1024);
  ASSERT_TRUE(object.ok());
  const int64_t size = 16 * 1024;
  ASSERT_TRUE(Register("edge", object.key(), 0, size).ok());
  FillRandom(object.data(), v1::DTYPE_FLOAT32, size / 4, rng_);
  const int64_t bytes = 32 * 32 * 4;  // 4 KiB
  v1::TransposeResponse resp;
  // Input ending on the region's last byte, output starting on its first.
  EXPECT_TRUE(TransposeShm("edge", size - bytes, "edge", 0, v1::DTYPE_FLOAT32, 32, 32, &resp).ok());
  EXPECT_CODE(TransposeShm("edge", size - bytes + 1, "edge", 0, v1::DTYPE_FLOAT32, 32, 32, &resp),
              INVALID_ARGUMENT, absl::StrCat("outside region \"edge\" of ", size, " bytes"));
  EXPECT_CODE(TransposeShm("edge", 0, "edge", size - bytes + 1, v1::DTYPE_FLOAT32, 32, 32, &resp),
              INVALID_ARGUMENT, "output.shared_memory");
  EXPECT_CODE(TransposeShm("edge", -4, "edge", 0, v1::DTYPE_FLOAT32, 32, 32, &resp),
              INVALID_ARGUMENT, "offset -4");
  EXPECT_CODE(TransposeShm("nope", 0, "edge", 0, v1::DTYPE_FLOAT32, 32, 32, &resp), NOT_FOUND,
              "\"nope\"");
  // byte_size must be the matrix's.
  v1::TransposeRequest req;
  *req.mutable_input() = SliceMatrix(v1::DTYPE_FLOAT32, 32, 32, "edge", 0, bytes - 4);
  grpc::ClientContext ctx;
  EXPECT_CODE(stub_->Transpose(&ctx, req, &resp), INVALID_ARGUMENT,
              absl::StrCat("input.shared_memory.byte_size: the matrix is ", bytes, " bytes, got ",
                           bytes - 4));
  // keep and shared_memory in one placement.
  *req.mutable_input() = SliceMatrix(v1::DTYPE_FLOAT32, 32, 32, "edge", 0, bytes);
  req.mutable_output()->set_keep(true);
  SetSlice(req.mutable_output()->mutable_shared_memory(), "edge", 0, bytes);
  grpc::ClientContext ctx2;
  EXPECT_CODE(stub_->Transpose(&ctx2, req, &resp), INVALID_ARGUMENT, "keep and shared_memory");
}

TEST_F(SharedMemoryTest, UploadFromAndDownloadIntoRegions) {
  const int64_t rows = 513, cols = 1031;  // a little over 2 MiB of float32
  const int64_t bytes = rows * cols * 4;
  ShmObject object(2 * bytes + 4096);
  ASSERT_TRUE(object.ok());
  ASSERT_TRUE(Register("up", object.key(), 0, bytes).ok());
  ASSERT_TRUE(Register("down", object.key(), bytes + 4096, bytes).ok());
  FillRandom(object.data(), v1::DTYPE_FLOAT32, rows * cols, rng_);

  grpc::ClientContext ctx;
  SetDeadline(ctx, 60);
  v1::TensorInfo info;
  auto writer = stub_->Upload(&ctx, &info);
  v1::UploadRequest first;
  first.set_dtype(v1::DTYPE_FLOAT32);
  first.set_rows(rows);
  first.set_cols(cols);
  SetSlice(first.mutable_shared_memory(), "up", 0, bytes);
  ASSERT_TRUE(writer->Write(first));
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(info.bytes(), bytes);

  grpc::ClientContext dctx;
  SetDeadline(dctx, 60);
  v1::DownloadRequest dl;
  dl.set_tensor_id(info.id());
  dl.set_release(true);
  SetSlice(dl.mutable_shared_memory(), "down", 0, bytes);
  auto reader = stub_->Download(&dctx, dl);
  v1::DownloadResponse msg;
  int messages = 0;
  while (reader->Read(&msg)) {
    ++messages;
    EXPECT_TRUE(msg.data().empty());
    EXPECT_EQ(msg.info().id(), info.id());
  }
  s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(messages, 1);
  EXPECT_EQ(std::memcmp(object.data(), object.data() + bytes + 4096, size_t(bytes)), 0);

  // A slice of the wrong size either way.
  grpc::ClientContext c2;
  v1::TensorInfo info2;
  auto w2 = stub_->Upload(&c2, &info2);
  SetSlice(first.mutable_shared_memory(), "up", 0, bytes - 1);
  w2->Write(first);
  w2->WritesDone();
  EXPECT_CODE(w2->Finish(), INVALID_ARGUMENT, "shared_memory.byte_size");
}

// Unregistering while ops use a region: each op either ran (correct) or
// found no region; the server goes on.
TEST_F(SharedMemoryTest, UnregisteredWhileOpsUseIt) {
  const int64_t rows = 200, cols = 300, bytes = rows * cols * 8;
  ShmObject object(2 * bytes);
  ASSERT_TRUE(object.ok());
  FillRandom(object.data(), v1::DTYPE_FLOAT64, rows * cols, rng_);
  std::atomic<bool> stop{false};
  std::atomic<int> ran{0}, not_found{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      auto stub = v1::Compute::NewStub(Connect(target()));
      while (!stop) {
        v1::TransposeRequest req;
        *req.mutable_input() = SliceMatrix(v1::DTYPE_FLOAT64, rows, cols, "busy", 0, bytes);
        SetSlice(req.mutable_output()->mutable_shared_memory(), "busy", bytes, bytes);
        grpc::ClientContext ctx;
        v1::TransposeResponse resp;
        grpc::Status s = stub->Transpose(&ctx, req, &resp);
        (s.ok() ? ran : s.error_code() == grpc::StatusCode::NOT_FOUND ? not_found : other)++;
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Register("busy", object.key(), 0, 2 * bytes).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(Unregister("busy").ok());
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_GT(ran.load(), 0);
  EXPECT_GT(not_found.load(), 0);
  EXPECT_EQ(other.load(), 0);
  // The last result that landed is the transpose.
  double x, y;
  std::memcpy(&x, object.data() + bytes + (5 * rows + 7) * 8, 8);
  std::memcpy(&y, object.data() + (7 * cols + 5) * 8, 8);
  EXPECT_EQ(x, y);
}

// A client shrinking, unlinking or rewriting its object while registered
// gets errors or wrong bytes, never a crashed server; others go on.
TEST_F(SharedMemoryTest, TruncatedUnlinkedAndRewrittenObjects) {
  const int64_t rows = 256, cols = 256, bytes = rows * cols * 4;
  ShmObject victim(2 * bytes);
  ShmObject bystander(2 * bytes);
  ASSERT_TRUE(victim.ok() && bystander.ok());
  FillRandom(victim.data(), v1::DTYPE_FLOAT32, rows * cols, rng_);
  FillRandom(bystander.data(), v1::DTYPE_FLOAT32, rows * cols, rng_);
  ASSERT_TRUE(Register("victim", victim.key(), 0, 2 * bytes).ok());
  ASSERT_TRUE(Register("bystander", bystander.key(), 0, 2 * bytes).ok());

  // Unlinked: the server's mapping (and descriptor) keep the object alive.
  victim.Unlink();
  v1::TransposeResponse resp;
  EXPECT_TRUE(
      TransposeShm("victim", 0, "victim", bytes, v1::DTYPE_FLOAT32, rows, cols, &resp).ok());

  // Rewritten during ops: wrong bytes at worst.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::mt19937_64 rng(seed_);
    while (!stop) FillRandom(victim.data(), v1::DTYPE_FLOAT32, rows * cols, rng);
  });
  for (int i = 0; i < 20; ++i) {
    TransposeShm("victim", 0, "victim", bytes, v1::DTYPE_FLOAT32, rows, cols, &resp);
  }
  stop = true;
  writer.join();

  // Truncated to nothing while registered, during ops and after.
  std::thread shrink([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_EQ(ftruncate(victim.fd(), 0), 0);
  });
  for (int i = 0; i < 20; ++i) {
    grpc::Status s =
        TransposeShm("victim", 0, "victim", bytes, v1::DTYPE_FLOAT32, rows, cols, &resp);
    EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
        << s.error_message();
  }
  shrink.join();
  // (A result written past the end grew the object again: shrink it once
  // more, and read it with the result returned inline.)
  ASSERT_EQ(ftruncate(victim.fd(), 0), 0);
  v1::TransposeRequest read_only;
  *read_only.mutable_input() = SliceMatrix(v1::DTYPE_FLOAT32, rows, cols, "victim", 0, bytes);
  grpc::ClientContext read_ctx;
  grpc::Status s = stub_->Transpose(&read_ctx, read_only, &resp);
  if (testing::TestBackend() == "cpu") {
    EXPECT_CODE(s, FAILED_PRECONDITION, "shrank");
  }  // pinned pages stay allocated: the GPU copies stale bytes, no error
  ASSERT_TRUE(Unregister("victim").ok());

  // The other client's region is untouched and still right.
  ASSERT_TRUE(
      TransposeShm("bystander", 0, "bystander", bytes, v1::DTYPE_FLOAT32, rows, cols, &resp).ok());
  EXPECT_EQ(std::memcmp(bystander.data() + bytes + (3 * rows + 2) * 4,
                        bystander.data() + (2 * cols + 3) * 4, 4),
            0);
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(stub_->GetServerInfo(&ctx, {}, &info).ok());
}

TEST_F(SharedMemoryTest, SixteenClientsEachWithTheirOwnRegion) {
  std::vector<std::future<std::string>> clients;
  for (int c = 0; c < 16; ++c) {
    clients.push_back(std::async(std::launch::async, [this, c] {
      const int64_t rows = 100 + c, cols = 77 + 2 * c, bytes = rows * cols * 4;
      ShmObject object(2 * bytes);
      if (!object.ok()) return std::string("cannot make the object");
      auto stub = v1::Compute::NewStub(Connect(target()));
      const std::string name = absl::StrCat("client-", c);
      {
        grpc::ClientContext ctx;
        v1::RegisterSharedMemoryRequest req;
        req.set_name(name);
        req.set_key(object.key());
        req.set_byte_size(2 * bytes);
        v1::SharedMemoryRegion region;
        if (auto s = stub->RegisterSharedMemory(&ctx, req, &region); !s.ok())
          return s.error_message();
      }
      std::mt19937_64 rng(seed_ + c);
      for (int i = 0; i < 10; ++i) {
        FillRandom(object.data(), v1::DTYPE_FLOAT32, rows * cols, rng);
        v1::TransposeRequest req;
        *req.mutable_input() = SliceMatrix(v1::DTYPE_FLOAT32, rows, cols, name, 0, bytes);
        SetSlice(req.mutable_output()->mutable_shared_memory(), name, bytes, bytes);
        grpc::ClientContext ctx;
        v1::TransposeResponse resp;
        if (auto s = stub->Transpose(&ctx, req, &resp); !s.ok()) return s.error_message();
        for (int64_t r = 0; r < rows; r += 9) {
          for (int64_t col = 0; col < cols; col += 5) {
            if (std::memcmp(object.data() + bytes + (col * rows + r) * 4,
                            object.data() + (r * cols + col) * 4, 4) != 0) {
              return absl::StrCat("client ", c, ": wrong element ", r, ",", col);
            }
          }
        }
      }
      grpc::ClientContext ctx;
      v1::UnregisterSharedMemoryRequest req;
      req.set_name(name);
      v1::UnregisterSharedMemoryResponse resp;
      if (auto s = stub->UnregisterSharedMemory(&ctx, req, &resp); !s.ok())
        return s.error_message();
      return std::string();
    }));
  }
  for (auto& c : clients) EXPECT_EQ(c.get(), "") << SeedNote();
}

// Shutdown lets every region go (unpinned and unmapped) and exits cleanly;
// the objects are the clients': the server neither unlinks nor changes them.
TEST(SharedMemoryShutdown, RegionsReleasedObjectsLeftToTheirOwners) {
  testing::ServerProcess server(
      GPUCOMPUTE_SERVER_PATH,
      {testing::BackendFlag(), "--allow_shared_memory", "--metrics_listen="});
  ASSERT_TRUE(server.started());
  ShmObject object(1 * kMiB);
  ASSERT_TRUE(object.ok());
  std::memset(object.data(), 0x5a, size_t(object.bytes()));
  auto stub = v1::Compute::NewStub(Connect(server.target()));
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    v1::RegisterSharedMemoryRequest req;
    req.set_name(absl::StrCat("left-", i));
    req.set_key(object.key());
    req.set_offset(i * 4096);
    req.set_byte_size(4096);
    v1::SharedMemoryRegion region;
    ASSERT_TRUE(stub->RegisterSharedMemory(&ctx, req, &region).ok());
  }
  const int status = server.Stop(SIGTERM);
  if (!server.wrapped()) {
    EXPECT_EQ(status, 0);  // a wrapper's status is its own
  }
  const std::string path = "/dev/shm" + object.key();
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path << " was removed";
  EXPECT_EQ(st.st_size, 1 * kMiB);
  for (int64_t i = 0; i < object.bytes(); i += 4093) {
    ASSERT_EQ(object.data()[i], 0x5a) << i;
  }
}

}  // namespace
}  // namespace gpucompute
