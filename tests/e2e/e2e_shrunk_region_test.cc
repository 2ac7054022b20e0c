// End to end over loopback: a hostile local client registers a shared-memory
// object, then truncates it to 4096 bytes, to nothing, and unlinks it, and
// after each names it in every operation that can (MatMul a, b and c;
// Transpose input and output; Reduce input and output; Upload from;
// Download into) at offsets inside, across and past the new end. Every call
// is answered with a status, the server lives, another client's region
// stays right, and a fresh object registered under the same name serves
// correct results again.
//
// CPU backend by default; GPUCOMPUTE_TEST_BACKEND=cuda runs it on a GPU,
// where this sequence once killed the server with SIGBUS.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/v1/compute.grpc.pb.h"
#include "support/e2e_util.h"
#include "support/server_process.h"
#include "support/shm_object.h"
#include "support/shm_requests.h"
#include "support/tensor_client.h"
#include "support/test_util.h"

namespace gpucompute {
namespace {

namespace v1 = ::gpucompute::v1;
using testing::FillRandom;
using testing::Inline;
using testing::SetDeadline;
using testing::SetSlice;
using testing::ShmObject;
using testing::SliceMatrix;

constexpr int64_t kObjectBytes = int64_t{1} << 20;
constexpr int64_t kDim = 8;                  // 8x8 float32 operands
constexpr int64_t kBytes = kDim * kDim * 4;  // 256
constexpr int64_t kRowSums = kDim * 4;       // a per-row Reduce's result
constexpr v1::DType kF32 = v1::DTYPE_FLOAT32;

// Inside the first 4096 bytes, across that end, far past it.
constexpr int64_t kOffsets[] = {0, 3968, 524288};

kernels::Problem ProblemFor(kernels::Op op) {
  kernels::Problem p{op, kernels::DType::kFloat32, kDim, kDim,
                     op == kernels::Op::kMatMul ? kDim : 1};
  p.reduce_axis = kernels::ReduceAxis::kPerRow;
  return p;
}

// "" when `got` matches the float64 reference of `op` on `a` (and `b`).
std::string Mismatch(kernels::Op op, const v1::Matrix& got, const char* a, const char* b) {
  const double err = testing::MaxError(got, kernels::ReferenceResult(ProblemFor(op), a, b));
  return err <= 1e-4 ? "" : absl::StrCat("error ", err);
}

class ShrunkRegionTest : public testing::SeededStubTest {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(
        GPUCOMPUTE_SERVER_PATH,
        {testing::BackendFlag(), "--allow_shared_memory", "--metrics_listen="});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started()) << "server did not start";
    ConnectTo(server_->target());
    b_ = Inline(kF32, kDim, kDim, Random(kDim * kDim).data());
  }

  std::string Random(int64_t count) {
    std::string bytes(size_t(count * 4), '\0');
    FillRandom(bytes.data(), kF32, count, rng_);
    return bytes;
  }

  grpc::Status Register(const std::string& name, const std::string& key) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    v1::RegisterSharedMemoryRequest req;
    req.set_name(name);
    req.set_key(key);
    req.set_byte_size(kObjectBytes);
    v1::SharedMemoryRegion region;
    return stub_->RegisterSharedMemory(&ctx, req, &region);
  }
  grpc::Status Unregister(const std::string& name) {
    grpc::ClientContext ctx;
    v1::UnregisterSharedMemoryRequest req;
    req.set_name(name);
    v1::UnregisterSharedMemoryResponse resp;
    return stub_->UnregisterSharedMemory(&ctx, req, &resp);
  }

  // One operation naming `region` at `offset`. With `object` (the client's
  // mapping, still whole) it also checks the result and reports a wrong one
  // as an error; without, any answer will do.
  using Operation =
      std::function<grpc::Status(const std::string& region, int64_t offset, const char* object)>;

  static grpc::Status Checked(grpc::Status s, const std::string& mismatch) {
    if (!s.ok() || mismatch.empty()) return s;
    return grpc::Status(grpc::StatusCode::DATA_LOSS, "wrong result: " + mismatch);
  }

  grpc::Status MatMul(const v1::MatMulRequest& req, v1::MatMulResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    return stub_->MatMul(&ctx, req, resp);
  }
  grpc::Status Transpose(const v1::TransposeRequest& req, v1::TransposeResponse* resp) {
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    return stub_->Transpose(&ctx, req, resp);
  }
  grpc::Status Reduce(v1::ReduceRequest req, v1::ReduceResponse* resp) {
    req.set_op(v1::REDUCE_OP_SUM);
    req.set_axis(v1::REDUCE_AXIS_PER_ROW);
    grpc::ClientContext ctx;
    SetDeadline(ctx, 60);
    return stub_->Reduce(&ctx, req, resp);
  }

  std::vector<std::pair<std::string, Operation>> Operations() {
    using kernels::Op;
    std::vector<std::pair<std::string, Operation>> ops;
    ops.emplace_back("MatMul a", [this](const std::string& r, int64_t at, const char* object) {
      v1::MatMulRequest req;
      *req.mutable_a() = SliceMatrix(kF32, kDim, kDim, r, at, kBytes);
      *req.mutable_b() = b_;
      v1::MatMulResponse resp;
      grpc::Status s = MatMul(req, &resp);
      return Checked(s,
                     object ? Mismatch(Op::kMatMul, resp.c(), object + at, b_.data().data()) : "");
    });
    ops.emplace_back("MatMul b", [this](const std::string& r, int64_t at, const char* object) {
      v1::MatMulRequest req;
      *req.mutable_a() = b_;
      *req.mutable_b() = SliceMatrix(kF32, kDim, kDim, r, at, kBytes);
      v1::MatMulResponse resp;
      grpc::Status s = MatMul(req, &resp);
      return Checked(s,
                     object ? Mismatch(Op::kMatMul, resp.c(), b_.data().data(), object + at) : "");
    });
    ops.emplace_back("MatMul c", [this](const std::string& r, int64_t at, const char* object) {
      v1::MatMulRequest req;
      *req.mutable_a() = b_;
      *req.mutable_b() = b_;
      SetSlice(req.mutable_output()->mutable_shared_memory(), r, at, kBytes);
      v1::MatMulResponse resp;
      grpc::Status s = MatMul(req, &resp);
      return Checked(s, object ? Mismatch(Op::kMatMul, Inline(kF32, kDim, kDim, object + at),
                                          b_.data().data(), b_.data().data())
                               : "");
    });
    ops.emplace_back(
        "Transpose input", [this](const std::string& r, int64_t at, const char* object) {
          v1::TransposeRequest req;
          *req.mutable_input() = SliceMatrix(kF32, kDim, kDim, r, at, kBytes);
          v1::TransposeResponse resp;
          grpc::Status s = Transpose(req, &resp);
          return Checked(
              s, object ? Mismatch(Op::kTranspose, resp.output(), object + at, nullptr) : "");
        });
    ops.emplace_back(
        "Transpose output", [this](const std::string& r, int64_t at, const char* object) {
          v1::TransposeRequest req;
          *req.mutable_input() = b_;
          SetSlice(req.mutable_output()->mutable_shared_memory(), r, at, kBytes);
          v1::TransposeResponse resp;
          grpc::Status s = Transpose(req, &resp);
          return Checked(s, object ? Mismatch(Op::kTranspose, Inline(kF32, kDim, kDim, object + at),
                                              b_.data().data(), nullptr)
                                   : "");
        });
    ops.emplace_back("Reduce input", [this](const std::string& r, int64_t at, const char* object) {
      v1::ReduceRequest req;
      *req.mutable_input() = SliceMatrix(kF32, kDim, kDim, r, at, kBytes);
      v1::ReduceResponse resp;
      grpc::Status s = Reduce(req, &resp);
      return Checked(s, object ? Mismatch(Op::kReduce, resp.output(), object + at, nullptr) : "");
    });
    ops.emplace_back("Reduce output", [this](const std::string& r, int64_t at, const char* object) {
      v1::ReduceRequest req;
      *req.mutable_input() = b_;
      SetSlice(req.mutable_output()->mutable_shared_memory(), r, at, kRowSums);
      v1::ReduceResponse resp;
      grpc::Status s = Reduce(req, &resp);
      return Checked(s, object ? Mismatch(Op::kReduce, Inline(kF32, kDim, 1, object + at),
                                          b_.data().data(), nullptr)
                               : "");
    });
    ops.emplace_back("Upload from", [this](const std::string& r, int64_t at, const char* object) {
      grpc::ClientContext ctx;
      SetDeadline(ctx, 60);
      v1::TensorInfo info;
      auto writer = stub_->Upload(&ctx, &info);
      v1::UploadRequest first;
      first.set_dtype(kF32);
      first.set_rows(kDim);
      first.set_cols(kDim);
      SetSlice(first.mutable_shared_memory(), r, at, kBytes);
      writer->Write(first);
      writer->WritesDone();
      grpc::Status s = writer->Finish();
      if (!s.ok()) return s;
      std::string held;
      grpc::Status d = testing::DownloadBytes(*stub_, info.id(), &held, 0, /*release=*/true);
      if (!d.ok() || object == nullptr) return d;
      return Checked(d, std::memcmp(held.data(), object + at, kBytes) == 0 ? "" : "bytes differ");
    });
    ops.emplace_back("Download into", [this](const std::string& r, int64_t at, const char* object) {
      v1::TensorInfo info;
      const std::string bytes = b_.data();
      grpc::Status s = testing::UploadFrom(
          *stub_, kF32, kDim, kDim, kBytes,
          [&bytes](int64_t off, char* dst, int64_t n) { std::memcpy(dst, bytes.data() + off, n); },
          {kBytes}, &info);
      if (!s.ok()) return s;
      grpc::ClientContext ctx;
      SetDeadline(ctx, 60);
      v1::DownloadRequest req;
      req.set_tensor_id(info.id());
      req.set_release(true);
      SetSlice(req.mutable_shared_memory(), r, at, kBytes);
      auto reader = stub_->Download(&ctx, req);
      v1::DownloadResponse msg;
      while (reader->Read(&msg)) {
      }
      s = reader->Finish();
      return Checked(
          s, object && std::memcmp(object + at, bytes.data(), kBytes) != 0 ? "bytes differ" : "");
    });
    return ops;
  }

  // Every operation at every offset on a whole object: all right.
  void ExpectAllRight(const std::string& region, ShmObject& object) {
    for (auto& [name, op] : Operations()) {
      for (int64_t at : kOffsets) {
        FillRandom(object.data(), kF32, kObjectBytes / 4, rng_);
        grpc::Status s = op(region, at, object.data());
        EXPECT_TRUE(s.ok()) << name << " at " << at << ": " << s.error_message() << ", "
                            << SeedNote();
      }
    }
  }

  static testing::ServerProcess* server_;
  v1::Matrix b_;
};
testing::ServerProcess* ShrunkRegionTest::server_ = nullptr;

TEST_F(ShrunkRegionTest, EveryOperationOnATruncatedOrUnlinkedObjectIsAnswered) {
  ShmObject victim(kObjectBytes), bystander(kObjectBytes);
  ASSERT_TRUE(victim.ok() && bystander.ok());
  ASSERT_TRUE(Register("victim", victim.key()).ok());
  ASSERT_TRUE(Register("bystander", bystander.key()).ok());
  ExpectAllRight("victim", victim);  // before: every operation right

  struct Stage {
    std::string name;
    off_t size;  // the object's size before each call
    bool unlink;
  };
  for (const Stage& stage : {Stage{"truncated to 4096", 4096, false},
                             Stage{"truncated to 0", 0, false}, Stage{"unlinked", 0, true}}) {
    if (stage.unlink) victim.Unlink();
    for (auto& [name, op] : Operations()) {
      for (int64_t at : kOffsets) {
        // Again before each call: a result written past the end grows it.
        ASSERT_EQ(ftruncate(victim.fd(), stage.size), 0);
        grpc::Status s = op("victim", at, nullptr);
        // Right bytes, stale bytes or a refusal: never a lost server.
        EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
            << stage.name << ", " << name << " at " << at << ": " << s.error_code() << " "
            << s.error_message();
      }
    }
    // The other client's region is still right.
    ExpectAllRight("bystander", bystander);
  }

  // A fresh object under the same name serves right results again.
  ASSERT_TRUE(Unregister("victim").ok());
  ShmObject fresh(kObjectBytes);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(Register("victim", fresh.key()).ok());
  ExpectAllRight("victim", fresh);
  ASSERT_TRUE(Unregister("").ok());
}

}  // namespace
}  // namespace gpucompute
