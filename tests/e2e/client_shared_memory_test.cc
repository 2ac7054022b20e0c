// The C++ client's shared memory against the real server (CPU backend, run
// with --allow_shared_memory): SharedMemoryRegion creates, maps and registers
// an object; MatMul, Transpose and Reduce read operands from its views and
// write results into them (37x23 and friends, float32 and float64, at
// offsets, mixed with inline operands), checked against the float64
// reference; Upload from a view and Download into one; View() past the end;
// the region's destructor, Close() and moves unregister and unlink exactly
// once; a server without the flag refuses and leaves no object behind. And
// the CLI's --shm, which must print what the inline path prints.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpucompute/client.h"
#include "gpucompute/kernels/problem.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/npy.h"
#include "gpucompute/shared_memory.h"
#include "support/client_suite.h"
#include "support/run_command.h"
#include "support/server_process.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

// Where POSIX shared-memory objects appear on Linux.
std::string ObjectPath(const std::string& key) { return "/dev/shm" + key; }

// Objects in /dev/shm named as SharedMemoryRegions name them
// ("gpucompute-<pid>-...") whose process has exited: left behind.
std::vector<std::string> OrphanedObjects() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    std::vector<std::string> parts = absl::StrSplit(name, '-');
    int pid;
    if (parts.size() < 4 || parts[0] != "gpucompute" || !absl::SimpleAtoi(parts[1], &pid)) {
      continue;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Objects in /dev/shm that this process's SharedMemoryRegions would create.
int OwnObjects() {
  const std::string prefix = absl::StrCat("gpucompute-", getpid(), "-");
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (absl::StartsWith(entry.path().filename().string(), prefix)) ++n;
  }
  return n;
}

kernels::DType KernelDType(DType d) {
  return d == DType::kFloat32 ? kernels::DType::kFloat32 : kernels::DType::kFloat64;
}

// Random values in [-1, 1) written into the view.
void Fill(const SharedMemoryView& view, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> dist(-1, 1);
  for (int64_t i = 0; i < view.rows * view.cols; ++i) {
    if (view.dtype == DType::kFloat32) {
      view.as<float>()[i] = float(dist(rng));
    } else {
      view.as<double>()[i] = dist(rng);
    }
  }
}

double At(DType dtype, const char* data, int64_t i) {
  if (dtype == DType::kFloat32) {
    float f;
    std::memcpy(&f, data + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, data + 8 * i, 8);
  return d;
}

// max |got - ref| / max(1, max |ref|) over `ref.size()` elements at `data`.
double MaxError(DType dtype, const char* data, const std::vector<double>& ref) {
  double scale = 1, err = 0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = At(dtype, data, int64_t(i));
    err = std::max(err, std::isfinite(g) ? std::fabs(g - ref[i]) / scale : INFINITY);
  }
  return err;
}

double Tolerance(DType dtype) { return dtype == DType::kFloat32 ? 1e-5 : 1e-12; }

// Options writing the result into `view` (designated initializers would
// trip -Wmissing-field-initializers).
MatMulOptions MatMulInto(const SharedMemoryView& view) {
  MatMulOptions options;
  options.output = view;
  return options;
}
OpOptions Into(const SharedMemoryView& view) {
  OpOptions options;
  options.output = view;
  return options;
}

bool Listed(const v1::ListSharedMemoryResponse& list, const std::string& name) {
  for (const v1::SharedMemoryRegion& r : list.regions()) {
    if (r.name() == name) return true;
  }
  return false;
}

class ClientSharedMemoryTest : public testing::ClientSuite<ClientSharedMemoryTest> {
 public:
  static std::vector<std::string> ServerFlags() {
    return {"--backend=cpu", "--allow_shared_memory", "--metrics_listen="};
  }

 protected:
  void TearDown() override {
    if (!client_) return;
    absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_EQ(list->regions_size(), 0) << "a test left regions registered";
    absl::StatusOr<v1::ListTensorsResponse> tensors = client_->ListTensors();
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    EXPECT_EQ(tensors->tensors_size(), 0) << "a test left tensors behind";
    EXPECT_EQ(OwnObjects(), 0) << "a test left shared-memory objects behind";
  }

  absl::StatusOr<SharedMemoryRegion> Create(int64_t bytes, std::string name = "") {
    return SharedMemoryRegion::Create(*client_, bytes, std::move(name));
  }
};

TEST_F(ClientSharedMemoryTest, CreateRegistersAMappedObjectOnlyItsUserCanOpen) {
  absl::StatusOr<SharedMemoryRegion> region = Create(4096, "mine");
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->name(), "mine");
  EXPECT_EQ(region->bytes(), 4096);
  EXPECT_NE(region->data(), nullptr);
  EXPECT_TRUE(absl::StartsWith(region->key(), absl::StrCat("/gpucompute-", getpid(), "-")))
      << region->key();
  struct stat st;
  ASSERT_EQ(stat(ObjectPath(region->key()).c_str(), &st), 0) << region->key();
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 4096);

  absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->regions_size(), 1);
  EXPECT_EQ(list->regions(0).name(), "mine");
  EXPECT_EQ(list->regions(0).key(), region->key());
  EXPECT_EQ(list->regions(0).byte_size(), 4096);
  EXPECT_EQ(list->regions(0).pinned(), region->pinned());

  // The name defaults to the key without its "/"; a name in use is refused
  // and leaves no object behind.
  absl::StatusOr<SharedMemoryRegion> unnamed = Create(100);
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_EQ(unnamed->name(), unnamed->key().substr(1));
  const int objects = OwnObjects();
  absl::StatusOr<SharedMemoryRegion> twice = Create(100, "mine");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kAlreadyExists) << twice.status();
  EXPECT_EQ(OwnObjects(), objects);
  EXPECT_EQ(Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OwnObjects(), objects);
}

TEST_F(ClientSharedMemoryTest, OpsReadOperandsFromViewsAndWriteResultsIntoThem) {
  std::mt19937_64 rng(20261201);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t m = 37, k = 23, n = 29;
    const int64_t size = DTypeSize(dtype);
    // Operands and results packed back to back at offsets that are not
    // page-aligned: a at 8, b right after it, the outputs after b.
    absl::StatusOr<SharedMemoryRegion> region = Create(1 << 16);
    ASSERT_TRUE(region.ok()) << region.status();
    absl::StatusOr<SharedMemoryView> a = region->View(dtype, m, k, 8);
    ASSERT_TRUE(a.ok()) << a.status();
    absl::StatusOr<SharedMemoryView> b = region->View(dtype, k, n, 8 + a->byte_size());
    ASSERT_TRUE(b.ok()) << b.status();
    const int64_t out_at = b->offset + b->byte_size() + 8;
    absl::StatusOr<SharedMemoryView> c = region->View(dtype, m, n, out_at);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(a->region, region->name());
    EXPECT_EQ(a->data, region->data() + 8);
    EXPECT_EQ(a->byte_size(), m * k * size);
    Fill(*a, rng);
    Fill(*b, rng);

    kernels::Problem p{
        .op = kernels::Op::kMatMul, .dtype = KernelDType(dtype), .m = m, .n = n, .k = k};
    const std::vector<double> product = kernels::ReferenceResult(p, a->data, b->data);

    absl::StatusOr<OpResult> mm = client_->MatMul(*a, *b, MatMulInto(*c));
    ASSERT_TRUE(mm.ok()) << mm.status();
    EXPECT_TRUE(mm->in_shared_memory);
    EXPECT_FALSE(mm->kept());
    EXPECT_EQ(mm->output.elements(), 0);
    EXPECT_FALSE(mm->report.variant().empty());
    EXPECT_LT(MaxError(dtype, c->data, product), Tolerance(dtype));

    // Views as operands, the result inline.
    absl::StatusOr<OpResult> inline_out = client_->MatMul(*a, *b);
    ASSERT_TRUE(inline_out.ok()) << inline_out.status();
    EXPECT_FALSE(inline_out->in_shared_memory);
    ASSERT_EQ(inline_out->output.ShapeString(), absl::StrCat(m, "x", n, " ", DTypeName(dtype)));
    EXPECT_LT(MaxError(dtype, inline_out->output.bytes().data(), product), Tolerance(dtype));

    // An inline operand mixed with one in the region, either way round.
    absl::StatusOr<Matrix> a_inline =
        Matrix::FromBytes(dtype, m, k, std::string(a->data, size_t(a->byte_size())));
    absl::StatusOr<Matrix> b_inline =
        Matrix::FromBytes(dtype, k, n, std::string(b->data, size_t(b->byte_size())));
    ASSERT_TRUE(a_inline.ok() && b_inline.ok());
    std::memset(c->data, 0, size_t(c->byte_size()));
    absl::StatusOr<OpResult> mixed = client_->MatMul(*a_inline, *b, MatMulInto(*c));
    ASSERT_TRUE(mixed.ok()) << mixed.status();
    EXPECT_TRUE(mixed->in_shared_memory);
    EXPECT_LT(MaxError(dtype, c->data, product), Tolerance(dtype));
    absl::StatusOr<OpResult> mixed_inline = client_->MatMul(*a, *b_inline);
    ASSERT_TRUE(mixed_inline.ok()) << mixed_inline.status();
    EXPECT_LT(MaxError(dtype, mixed_inline->output.bytes().data(), product), Tolerance(dtype));

    // Transpose: exact.
    absl::StatusOr<SharedMemoryView> t = region->View(dtype, k, m, out_at);
    ASSERT_TRUE(t.ok()) << t.status();
    absl::StatusOr<OpResult> tr = client_->Transpose(*a, Into(*t));
    ASSERT_TRUE(tr.ok()) << tr.status();
    EXPECT_TRUE(tr->in_shared_memory);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(At(dtype, t->data, j * m + i), At(dtype, a->data, i * k + j)) << i << "," << j;
      }
    }

    // Reduce over every axis, of a view, into a view; and an inline input
    // reduced into a view.
    struct Axis {
      v1::ReduceAxis axis;
      kernels::ReduceAxis kernel_axis;
      int64_t rows, cols;
    };
    for (const Axis& ax :
         {Axis{v1::REDUCE_AXIS_ALL, kernels::ReduceAxis::kAll, 1, 1},
          Axis{v1::REDUCE_AXIS_PER_ROW, kernels::ReduceAxis::kPerRow, m, 1},
          Axis{v1::REDUCE_AXIS_PER_COLUMN, kernels::ReduceAxis::kPerColumn, 1, k}}) {
      for (auto [op, kernel_op] : {std::pair{v1::REDUCE_OP_SUM, kernels::ReduceOp::kSum},
                                   std::pair{v1::REDUCE_OP_MAX, kernels::ReduceOp::kMax},
                                   std::pair{v1::REDUCE_OP_MEAN, kernels::ReduceOp::kMean}}) {
        SCOPED_TRACE(absl::StrCat(ReduceOpName(op), " ", ReduceAxisName(ax.axis)));
        kernels::Problem rp{.op = kernels::Op::kReduce,
                            .dtype = KernelDType(dtype),
                            .m = m,
                            .n = k,
                            .k = 1,
                            .reduce_op = kernel_op,
                            .reduce_axis = ax.kernel_axis};
        const std::vector<double> want = kernels::ReferenceResult(rp, a->data, nullptr);
        absl::StatusOr<SharedMemoryView> r = region->View(dtype, ax.rows, ax.cols, out_at);
        ASSERT_TRUE(r.ok()) << r.status();
        std::memset(r->data, 0xff, size_t(r->byte_size()));  // NaNs until written
        absl::StatusOr<OpResult> red = client_->Reduce(*a, op, ax.axis, Into(*r));
        ASSERT_TRUE(red.ok()) << red.status();
        EXPECT_TRUE(red->in_shared_memory);
        // The contract's bound for sums: 1e-5 * sum |x|, |x| < 1.
        const double tol = dtype == DType::kFloat32 ? 1e-5 * double(m * k) : 1e-12 * double(m * k);
        EXPECT_LT(MaxError(dtype, r->data, want), tol);

        std::memset(r->data, 0xff, size_t(r->byte_size()));
        absl::StatusOr<OpResult> from_inline = client_->Reduce(*a_inline, op, ax.axis, Into(*r));
        ASSERT_TRUE(from_inline.ok()) << from_inline.status();
        EXPECT_LT(MaxError(dtype, r->data, want), tol);
      }
    }

    // A result view of another byte size (the other dtype, one row more)
    // is the server's INVALID_ARGUMENT; one of the right size but another
    // shape is the client's, after the call (the slice carries no shape).
    absl::StatusOr<SharedMemoryView> wrong = region->View(dtype, n, m, out_at);
    ASSERT_TRUE(wrong.ok());
    absl::StatusOr<SharedMemoryView> narrow =
        region->View(dtype == DType::kFloat32 ? DType::kFloat64 : DType::kFloat32, m, n, out_at);
    ASSERT_TRUE(narrow.ok());
    absl::StatusOr<SharedMemoryView> taller = region->View(dtype, m + 1, n, out_at);
    ASSERT_TRUE(taller.ok());
    for (const SharedMemoryView& bad : {*wrong, *narrow, *taller}) {
      absl::StatusOr<OpResult> refused = client_->MatMul(*a, *b, MatMulInto(bad));
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    }
    absl::StatusOr<OpResult> transposed = client_->MatMul(*a, *b, MatMulInto(*wrong));
    EXPECT_THAT(std::string(transposed.status().message()),
                HasSubstr(absl::StrCat("the result is ", m, "x", n, " ", DTypeName(dtype),
                                       " but the output view is ", n, "x", m)));
    absl::StatusOr<SharedMemoryView> column = region->View(dtype, k, 1, out_at);
    ASSERT_TRUE(column.ok());
    absl::StatusOr<OpResult> row_not_column =
        client_->Reduce(*a, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_PER_COLUMN, Into(*column));
    EXPECT_EQ(row_not_column.status().code(), absl::StatusCode::kInvalidArgument)
        << row_not_column.status();
    // keep and output at once: INVALID_ARGUMENT.
    MatMulOptions keep_and_output = MatMulInto(*c);
    keep_and_output.keep = true;
    absl::StatusOr<OpResult> both = client_->MatMul(*a, *b, keep_and_output);
    EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument) << both.status();
  }
}

TEST_F(ClientSharedMemoryTest, UploadFromAViewAndDownloadIntoOne) {
  std::mt19937_64 rng(7);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    absl::StatusOr<SharedMemoryRegion> region = Create(3 * 37 * 23 * 8 + 64);
    ASSERT_TRUE(region.ok()) << region.status();
    absl::StatusOr<SharedMemoryView> src = region->View(dtype, 37, 23, 16);
    ASSERT_TRUE(src.ok()) << src.status();
    Fill(*src, rng);
    absl::StatusOr<Tensor> tensor = client_->Upload(*src, {.ttl_seconds = 60});
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->rows(), 37);
    EXPECT_EQ(tensor->cols(), 23);
    EXPECT_EQ(tensor->dtype(), dtype);
    EXPECT_EQ(tensor->info().bytes(), src->byte_size());

    // The tensor holds a copy: rewriting the view does not change it.
    const std::string before(src->data, size_t(src->byte_size()));
    std::memset(src->data, 0, size_t(src->byte_size()));
    absl::StatusOr<Matrix> streamed = tensor->Download();
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    EXPECT_TRUE(streamed->bytes() == before);

    absl::StatusOr<SharedMemoryView> dst =
        region->View(dtype, 37, 23, src->offset + src->byte_size() + 8);
    ASSERT_TRUE(dst.ok()) << dst.status();
    ASSERT_TRUE(client_->Download(tensor->id(), *dst).ok());
    EXPECT_EQ(std::string(dst->data, size_t(dst->byte_size())), before);

    // A view of another size is the server's INVALID_ARGUMENT, of another
    // shape the client's; release=true releases the tensor once written.
    absl::StatusOr<SharedMemoryView> other = region->View(dtype, 23, 37, dst->offset);
    ASSERT_TRUE(other.ok());
    absl::Status shape = client_->Download(tensor->id(), *other);
    EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape;
    EXPECT_THAT(std::string(shape.message()), HasSubstr("is 37x23"));
    absl::StatusOr<SharedMemoryView> shorter = region->View(dtype, 36, 23, dst->offset);
    ASSERT_TRUE(shorter.ok());
    absl::Status size = client_->Download(tensor->id(), *shorter);
    EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument) << size;
    std::memset(dst->data, 0, size_t(dst->byte_size()));
    const std::string id = tensor->Detach();
    ASSERT_TRUE(client_->Download(id, *dst, /*release=*/true).ok());
    EXPECT_EQ(std::string(dst->data, size_t(dst->byte_size())), before);
    absl::Status gone = client_->Download(id, *dst);
    EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;

    // A kept result read back into the region.
    absl::StatusOr<OpResult> kept =
        client_->Transpose(*dst, OpOptions{.variant = "", .keep = true, .ttl_seconds = 0});
    ASSERT_TRUE(kept.ok()) << kept.status();
    ASSERT_TRUE(kept->kept());
    absl::StatusOr<SharedMemoryView> back = region->View(dtype, 23, 37, 16);
    ASSERT_TRUE(back.ok());
    ASSERT_TRUE(client_->Download(kept->tensor.id(), *back).ok());
    EXPECT_EQ(At(dtype, back->data, 1 * 37 + 2), At(dtype, dst->data, 2 * 23 + 1));
  }
}

TEST_F(ClientSharedMemoryTest, ViewOutsideTheRegionIsInvalidArgument) {
  absl::StatusOr<SharedMemoryRegion> region = Create(1000, "small");
  ASSERT_TRUE(region.ok()) << region.status();
  // Exactly to the end fits; one element more, a byte further, a negative or
  // past-the-end offset, or a negative shape does not.
  EXPECT_TRUE(region->View(DType::kFloat32, 10, 25).ok());
  EXPECT_TRUE(region->View(DType::kFloat64, 1, 1, 992).ok());
  EXPECT_TRUE(region->View(DType::kFloat32, 0, 0, 1000).ok());
  struct Bad {
    DType dtype;
    int64_t rows, cols, offset;
  };
  for (const Bad& bad : {Bad{DType::kFloat32, 10, 26, 0}, Bad{DType::kFloat32, 10, 25, 1},
                         Bad{DType::kFloat64, 1, 1, 993}, Bad{DType::kFloat64, 1, 1, -8},
                         Bad{DType::kFloat32, 1, 1, 1001}, Bad{DType::kFloat32, -1, 4, 0},
                         Bad{DType::kFloat64, int64_t{1} << 32, int64_t{1} << 32, 0}}) {
    absl::StatusOr<SharedMemoryView> view = region->View(bad.dtype, bad.rows, bad.cols, bad.offset);
    EXPECT_EQ(view.status().code(), absl::StatusCode::kInvalidArgument)
        << bad.rows << "x" << bad.cols << " at " << bad.offset << ": " << view.status();
  }
  absl::StatusOr<SharedMemoryView> past = region->View(DType::kFloat32, 10, 26, 0);
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("1040 bytes"));
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("\"small\" of 1000 bytes"));
}

TEST_F(ClientSharedMemoryTest, DestroyedRegionsAreUnregisteredAndUnlinked) {
  std::string key;
  {
    absl::StatusOr<SharedMemoryRegion> region = Create(1 << 12, "scoped");
    ASSERT_TRUE(region.ok()) << region.status();
    key = region->key();
    EXPECT_TRUE(std::filesystem::exists(ObjectPath(key)));
    absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
    ASSERT_TRUE(list.ok()) << list.status();
    EXPECT_TRUE(Listed(*list, "scoped"));
  }
  absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_FALSE(Listed(*list, "scoped"));
  EXPECT_FALSE(std::filesystem::exists(ObjectPath(key)));

  // Close() does it now; the region is closed afterwards, a second Close()
  // has nothing to do, and ops naming it are NOT_FOUND.
  absl::StatusOr<SharedMemoryRegion> closing = Create(1 << 12, "closing");
  ASSERT_TRUE(closing.ok()) << closing.status();
  absl::StatusOr<SharedMemoryView> view = closing->View(DType::kFloat32, 4, 4);
  ASSERT_TRUE(view.ok());
  key = closing->key();
  EXPECT_TRUE(closing->Close().ok());
  EXPECT_FALSE(std::filesystem::exists(ObjectPath(key)));
  EXPECT_EQ(closing->View(DType::kFloat32, 4, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(closing->Close().ok());
  SharedMemoryView stale = *view;
  stale.data = nullptr;
  absl::StatusOr<OpResult> unknown = client_->Transpose(stale);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("closing"));

  // A move hands the registration over: the moved-from object unregisters
  // nothing, the new owner does, once.
  absl::StatusOr<SharedMemoryRegion> first = Create(1 << 12, "first");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string first_key = first->key();
  std::optional<SharedMemoryRegion> owner;
  owner.emplace(std::move(*first));
  first = absl::UnknownError("moved");  // destroys the moved-from region
  list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(Listed(*list, "first"));
  EXPECT_TRUE(std::filesystem::exists(ObjectPath(first_key)));
  EXPECT_EQ(owner->name(), "first");
  absl::StatusOr<SharedMemoryView> moved_view = owner->View(DType::kFloat64, 2, 2);
  ASSERT_TRUE(moved_view.ok()) << moved_view.status();
  moved_view->as<double>()[0] = 1;
  moved_view->as<double>()[1] = 2;
  moved_view->as<double>()[2] = 3;
  moved_view->as<double>()[3] = 4;
  absl::StatusOr<OpResult> sum =
      client_->Reduce(*moved_view, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_ALL);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->output.at(0, 0), 10.0);

  // Move assignment closes the region assigned to.
  absl::StatusOr<SharedMemoryRegion> second = Create(1 << 12, "second");
  ASSERT_TRUE(second.ok()) << second.status();
  *owner = std::move(*second);
  list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok());
  EXPECT_FALSE(Listed(*list, "first"));
  EXPECT_TRUE(Listed(*list, "second"));
  EXPECT_FALSE(std::filesystem::exists(ObjectPath(first_key)));
  EXPECT_EQ(owner->name(), "second");
  owner.reset();
  list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->regions_size(), 0);
}

TEST_F(ClientSharedMemoryTest, RegionOutlivesTheClientThatMadeIt) {
  std::optional<SharedMemoryRegion> region;
  {
    ClientOptions options;
    options.target = server_->target();
    absl::StatusOr<Client> other = Client::Create(options);
    ASSERT_TRUE(other.ok()) << other.status();
    absl::StatusOr<SharedMemoryRegion> made = SharedMemoryRegion::Create(*other, 256, "orphan");
    ASSERT_TRUE(made.ok()) << made.status();
    region.emplace(std::move(*made));
  }
  absl::StatusOr<SharedMemoryView> v = region->View(DType::kFloat32, 2, 3);
  ASSERT_TRUE(v.ok());
  for (int i = 0; i < 6; ++i) v->as<float>()[i] = float(i);
  absl::StatusOr<OpResult> t = client_->Transpose(*v);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->output.at(2, 1), 5.0);
  region.reset();  // unregisters over the channel the gone Client made
  absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok());
  EXPECT_FALSE(Listed(*list, "orphan"));
}

TEST_F(ClientSharedMemoryTest, ServerWithoutTheFlagRefusesAndNoObjectIsLeft) {
  testing::ServerProcess plain(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--metrics_listen="});
  ASSERT_TRUE(plain.started());
  ClientOptions options;
  options.target = plain.target();
  absl::StatusOr<Client> client = Client::Create(options);
  ASSERT_TRUE(client.ok()) << client.status();
  const int objects = OwnObjects();
  absl::StatusOr<SharedMemoryRegion> region = SharedMemoryRegion::Create(*client, 1 << 12);
  ASSERT_EQ(region.status().code(), absl::StatusCode::kFailedPrecondition) << region.status();
  EXPECT_THAT(std::string(region.status().message()), HasSubstr("--allow_shared_memory"));
  EXPECT_EQ(OwnObjects(), objects);
  EXPECT_EQ(client->ListSharedMemory().status().code(), absl::StatusCode::kFailedPrecondition);
}

// ----------------------------------------------------------------- CLI --

using CliRun = testing::CommandResult;

CliRun RunCli(const std::string& args) {
  return testing::RunCommand(absl::StrCat(GPUCOMPUTE_CLI, " ", args));
}

// The output's lines but its timing lines ("time ..."), which differ per run.
std::string WithoutTimings(const std::string& output) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "time ")) continue;
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

class CliSharedMemoryTest : public ClientSharedMemoryTest {
 protected:
  void SetUp() override {
    ClientSharedMemoryTest::SetUp();
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("client_shared_memory_test_", getpid());
    std::filesystem::create_directories(dir_);
    server_flag_ = absl::StrCat(" --server=", server_->target());
    orphans_before_ = OrphanedObjects();
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    EXPECT_EQ(OrphanedObjects(), orphans_before_) << "a CLI run left its object behind";
    ClientSharedMemoryTest::TearDown();
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Runs `args` inline and with --shm, each writing its own --out; expects
  // the same printed lines (but for timings) and the same .npy bytes.
  void ExpectSameAsInline(const std::string& args) {
    SCOPED_TRACE(args);
    CliRun plain = RunCli(absl::StrCat(args, " --out=", Path("inline.npy"), server_flag_));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    CliRun shm = RunCli(absl::StrCat(args, " --shm --out=", Path("shm.npy"), server_flag_));
    ASSERT_EQ(shm.exit_code, 0) << shm.output;
    std::string want = WithoutTimings(plain.output);
    const std::string got = WithoutTimings(shm.output);
    // The last line names the file written.
    want.replace(want.find(Path("inline.npy")), Path("inline.npy").size(), Path("shm.npy"));
    EXPECT_EQ(got, want);
    absl::StatusOr<Matrix> from_inline = ReadNpy(Path("inline.npy"));
    absl::StatusOr<Matrix> from_shm = ReadNpy(Path("shm.npy"));
    ASSERT_TRUE(from_inline.ok()) << from_inline.status();
    ASSERT_TRUE(from_shm.ok()) << from_shm.status();
    EXPECT_EQ(from_shm->ShapeString(), from_inline->ShapeString());
    EXPECT_TRUE(from_shm->bytes() == from_inline->bytes());
  }

  std::filesystem::path dir_;
  std::string server_flag_;
  std::vector<std::string> orphans_before_;
};

TEST_F(CliSharedMemoryTest, ShmPrintsAndWritesWhatTheInlinePathDoes) {
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 37, 23, 11);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat32, 23, 29, 12);
  absl::StatusOr<Matrix> d = Matrix::Random(DType::kFloat64, 37, 23, 13);
  absl::StatusOr<Matrix> e = Matrix::Random(DType::kFloat64, 23, 5, 14);
  ASSERT_TRUE(a.ok() && b.ok() && d.ok() && e.ok());
  ASSERT_TRUE(WriteNpy(Path("a.npy"), *a).ok());
  ASSERT_TRUE(WriteNpy(Path("b.npy"), *b).ok());
  ASSERT_TRUE(WriteNpy(Path("d.npy"), *d).ok());
  ASSERT_TRUE(WriteNpy(Path("e.npy"), *e).ok());

  ExpectSameAsInline(absl::StrCat("matmul ", Path("a.npy"), " ", Path("b.npy")));
  ExpectSameAsInline(absl::StrCat("matmul ", Path("d.npy"), " ", Path("e.npy"), " --repeat=2"));
  ExpectSameAsInline(absl::StrCat("transpose ", Path("d.npy")));
  ExpectSameAsInline(absl::StrCat("reduce ", Path("a.npy"), " --op=max --axis=per_row"));
  ExpectSameAsInline(absl::StrCat("reduce ", Path("d.npy"), " --op=sum --axis=all"));
  ExpectSameAsInline("matmul --random=5x3x4 --dtype=float64 --seed=9");
  ExpectSameAsInline("reduce --random=3x7 --op=mean --axis=per_column");
  // Small results are printed whole, from the region.
  CliRun small = RunCli(absl::StrCat("matmul --random=5x3x4 --shm", server_flag_));
  ASSERT_EQ(small.exit_code, 0) << small.output;
  EXPECT_THAT(small.output, HasSubstr("result    5x4 float32"));
  EXPECT_THAT(small.output, HasSubstr("          ["));
}

TEST_F(CliSharedMemoryTest, ShmWithTensorsAndKeep) {
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 9, 4, 21);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat32, 4, 6, 22);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WriteNpy(Path("a.npy"), *a).ok());
  absl::StatusOr<Tensor> tb = client_->Upload(*b);
  ASSERT_TRUE(tb.ok()) << tb.status();

  // An inline file placed in the region, a tensor named by @ID, the result
  // into the region.
  CliRun plain = RunCli(absl::StrCat("matmul ", Path("a.npy"), " @", tb->id(), server_flag_));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  CliRun shm = RunCli(absl::StrCat("matmul ", Path("a.npy"), " @", tb->id(),
                                   " --shm --out=", Path("c.npy"), server_flag_));
  ASSERT_EQ(shm.exit_code, 0) << shm.output;
  EXPECT_THAT(shm.output, HasSubstr("result    9x6 float32"));
  EXPECT_EQ(WithoutTimings(shm.output),
            WithoutTimings(plain.output) + "wrote     " + Path("c.npy") + "\n");
  absl::StatusOr<Matrix> c = ReadNpy(Path("c.npy"));
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<OpResult> want = client_->MatMul(*a, *tb);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(c->bytes() == want->output.bytes());

  // --keep: the operands come from the region, the result stays on the
  // server.
  CliRun kept =
      RunCli(absl::StrCat("matmul ", Path("a.npy"), " @", tb->id(), " --shm --keep", server_flag_));
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_THAT(kept.output, HasSubstr("kept      "));
  EXPECT_THAT(kept.output, HasSubstr("9x6 float32"));
  const size_t at = kept.output.find("kept      ") + 10;
  const std::string id = kept.output.substr(at, kept.output.find(' ', at) - at);
  absl::StatusOr<Matrix> held = client_->Download(id, 0, /*release=*/true);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->bytes() == want->output.bytes());

  // Mismatched operands are the server's error, not a crash; the region
  // is gone either way.
  ASSERT_TRUE(WriteNpy(Path("b.npy"), *b).ok());
  CliRun mismatched =
      RunCli(absl::StrCat("matmul ", Path("b.npy"), " ", Path("a.npy"), " --shm", server_flag_));
  EXPECT_EQ(mismatched.exit_code, 1) << mismatched.output;
  EXPECT_THAT(mismatched.output, HasSubstr("INVALID_ARGUMENT"));
}

// `regions` lists what is registered; `unregister` clears a region by name
// (a crashed process's), exits 1 for a name not registered and 2 without one.
TEST_F(CliSharedMemoryTest, RegionsListsAndUnregisterClears) {
  absl::StatusOr<SharedMemoryRegion> region =
      SharedMemoryRegion::Create(*client_, 256, "cli-listed");
  ASSERT_TRUE(region.ok()) << region.status();
  CliRun listed = RunCli(absl::StrCat("regions", server_flag_));
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("cli-listed"));
  EXPECT_THAT(listed.output, HasSubstr(" 256 "));

  CliRun gone = RunCli(absl::StrCat("unregister cli-listed", server_flag_));
  EXPECT_EQ(gone.exit_code, 0) << gone.output;
  EXPECT_THAT(gone.output, HasSubstr("unregistered  1"));
  absl::StatusOr<v1::ListSharedMemoryResponse> list = client_->ListSharedMemory();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_FALSE(Listed(*list, "cli-listed"));

  CliRun again = RunCli(absl::StrCat("unregister cli-listed", server_flag_));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_THAT(again.output, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(again.output, HasSubstr("cli-listed"));
  CliRun neither = RunCli(absl::StrCat("unregister", server_flag_));
  EXPECT_EQ(neither.exit_code, 2) << neither.output;
  EXPECT_THAT(neither.output, HasSubstr("--all"));
}

TEST_F(CliSharedMemoryTest, ShmAgainstAServerWithoutTheFlag) {
  testing::ServerProcess plain(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu", "--metrics_listen="});
  ASSERT_TRUE(plain.started());
  CliRun run = RunCli(absl::StrCat("transpose --random=3x4 --shm --server=", plain.target()));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(run.output, HasSubstr("--allow_shared_memory"));
  EXPECT_THAT(run.output, HasSubstr("same host"));

  CliRun help = RunCli("matmul --help");
  ASSERT_EQ(help.exit_code, 0) << help.output;
  EXPECT_THAT(help.output, HasSubstr("--shm"));
  EXPECT_THAT(help.output, HasSubstr("--allow_shared_memory"));
}

}  // namespace
}  // namespace gpucompute
