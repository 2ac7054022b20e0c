// The C++ client's tensors and the CLI's tensor commands against the real
// server (CPU backend): Tensor handles release on destruction, Upload and
// Download round trips are exact at odd shapes and chunk sizes, ops take
// tensors and keep their results, and `gpucompute upload` -> `matmul @a @b
// --keep` -> `download` gives the product.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "gpucompute/client.h"
#include "gpucompute/npy.h"
#include "support/run_command.h"
#include "support/server_process.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

class ClientTensorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ServerProcess(GPUCOMPUTE_SERVER_PATH, {"--backend=cpu"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    ClientOptions options;
    options.target = server_->target();
    absl::StatusOr<Client> client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_.emplace(std::move(*client));
  }
  // Tensors the server holds now.
  int Held() {
    absl::StatusOr<v1::ListTensorsResponse> list = client_->ListTensors();
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? list->tensors_size() : -1;
  }
  void TearDown() override {
    if (client_) {
      EXPECT_EQ(Held(), 0) << "a test left tensors behind";
    }
  }

  static testing::ServerProcess* server_;
  std::optional<Client> client_;
};
testing::ServerProcess* ClientTensorTest::server_ = nullptr;

void ExpectSameBytes(const Matrix& got, const Matrix& want) {
  EXPECT_EQ(got.ShapeString(), want.ShapeString());
  EXPECT_TRUE(got.bytes() == want.bytes()) << "payload differs";
}

// c = a @ b in float64.
std::vector<double> Product(const Matrix& a, const Matrix& b) {
  std::vector<double> c(a.rows() * b.cols(), 0.0);
  for (int64_t i = 0; i < a.rows(); ++i)
    for (int64_t p = 0; p < a.cols(); ++p)
      for (int64_t j = 0; j < b.cols(); ++j) c[i * b.cols() + j] += a.at(i, p) * b.at(p, j);
  return c;
}

TEST_F(ClientTensorTest, TensorReleasesOnDestructionUnlessMovedOrDetached) {
  absl::StatusOr<Matrix> m = Matrix::Random(DType::kFloat32, 3, 5, 1);
  ASSERT_TRUE(m.ok());
  {
    absl::StatusOr<Tensor> t = client_->Upload(*m);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(static_cast<bool>(*t));
    EXPECT_EQ(t->info().rows(), 3);
    EXPECT_EQ(t->info().cols(), 5);
    EXPECT_EQ(t->info().bytes(), 60);
    EXPECT_EQ(t->dtype(), DType::kFloat32);
    EXPECT_FALSE(t->info().device().empty());
    EXPECT_EQ(Held(), 1);
    Tensor moved = std::move(*t);  // ownership moves; the moved-from names nothing
    EXPECT_FALSE(static_cast<bool>(*t));
    EXPECT_EQ(Held(), 1);
  }
  EXPECT_EQ(Held(), 0);

  std::string id;
  {
    absl::StatusOr<Tensor> t = client_->Upload(*m);
    ASSERT_TRUE(t.ok()) << t.status();
    id = t->Detach();
    EXPECT_FALSE(static_cast<bool>(*t));
  }
  EXPECT_EQ(Held(), 1);  // detached: still held
  absl::StatusOr<Matrix> back = client_->Download(id, 0, /*release=*/true);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameBytes(*back, *m);
  EXPECT_EQ(Held(), 0);

  absl::StatusOr<Tensor> t = client_->Upload(*m);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->Release().ok());
  EXPECT_FALSE(static_cast<bool>(*t));
  EXPECT_TRUE(t->Release().ok());  // empty: nothing to do
  absl::StatusOr<v1::ReleaseTensorsResponse> again = client_->Release({id});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->released(), 0);  // unknown ids are skipped
  absl::StatusOr<Matrix> gone = client_->Download(id);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
}

TEST_F(ClientTensorTest, UploadDownloadRoundTripIsExactAtOddShapesAndChunks) {
  struct Case {
    DType dtype;
    int64_t rows, cols, upload_chunk, download_chunk;
  };
  for (const Case& c : std::vector<Case>{{DType::kFloat32, 1, 1, 1, 1},
                                         {DType::kFloat32, 7, 13, 1, 3},
                                         {DType::kFloat64, 13, 7, 5, 0},
                                         {DType::kFloat32, 257, 129, 4093, 1000},
                                         {DType::kFloat64, 333, 1001, 1 << 20, 65537},
                                         // Chunks of 1 MiB and more are copied on a helper
                                         // thread, uneven last ones included.
                                         {DType::kFloat64, 700, 701, (1 << 20) + 7, 1 << 20}}) {
    SCOPED_TRACE(
        absl::StrCat(c.rows, "x", c.cols, " chunks ", c.upload_chunk, "/", c.download_chunk));
    absl::StatusOr<Matrix> m = Matrix::Random(c.dtype, c.rows, c.cols, c.rows * 31 + c.cols);
    ASSERT_TRUE(m.ok());
    absl::StatusOr<Tensor> t =
        client_->Upload(*m, {.ttl_seconds = 60, .chunk_bytes = c.upload_chunk});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->info().bytes(), m->byte_size());
    absl::StatusOr<Matrix> back = t->Download(c.download_chunk);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSameBytes(*back, *m);
    // And in place, into a kept matrix of the same size.
    absl::StatusOr<Matrix> into = Matrix::Random(c.dtype, c.rows, c.cols, 1);
    ASSERT_TRUE(into.ok());
    ASSERT_TRUE(client_->Download(t->id(), *into, c.download_chunk).ok());
    ExpectSameBytes(*into, *m);
  }
  // From raw memory through a view, without a Matrix.
  std::vector<double> raw(3 * 4);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = 0.5 * double(i) - 1;
  absl::StatusOr<Tensor> t = client_->Upload(MatrixView(DType::kFloat64, 3, 4, raw.data()));
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<Matrix> back = t->Download();
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->at(2, 3), raw[11]);
  EXPECT_EQ(client_->Upload(*back, {.chunk_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Downloading into a kept matrix writes its storage in place when the size
// matches (the same bytes, no new allocation), and replaces it when not.
TEST_F(ClientTensorTest, DownloadIntoAMatrixReusesItsStorage) {
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 67, 45, 11);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat32, 67, 45, 12);
  absl::StatusOr<Matrix> c = Matrix::Random(DType::kFloat64, 5, 3, 13);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<std::string> ids;
  for (const Matrix* m : {&*a, &*b, &*c}) {
    absl::StatusOr<Tensor> t = client_->Upload(*m);
    ASSERT_TRUE(t.ok()) << t.status();
    ids.push_back(t->Detach());
  }
  Matrix into;
  ASSERT_TRUE(client_->Download(ids[0], into).ok());
  ExpectSameBytes(into, *a);
  const char* storage = into.bytes().data();
  v1::TensorInfo info;
  ASSERT_TRUE(client_->Download(ids[1], into, /*chunk_bytes=*/1000, false, &info).ok());
  ExpectSameBytes(into, *b);
  EXPECT_EQ(into.bytes().data(), storage) << "the same size was not written in place";
  EXPECT_EQ(info.id(), ids[1]);
  ASSERT_TRUE(client_->Download(ids[2], into, 0, /*release=*/true).ok());
  ExpectSameBytes(into, *c);
  // Unknown: NOT_FOUND, and the matrix is left empty.
  EXPECT_EQ(client_->Download(ids[2], into).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(into.byte_size(), 0);
  EXPECT_TRUE(client_->Release({ids[0], ids[1]}).ok());
}

TEST_F(ClientTensorTest, OpsTakeTensorsAndKeepResults) {
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat64, 9, 5, 3);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat64, 5, 6, 4);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<Tensor> ta = client_->Upload(*a);
  ASSERT_TRUE(ta.ok()) << ta.status();
  const std::vector<double> want = Product(*a, *b);

  // A tensor and an inline matrix, result inline.
  absl::StatusOr<OpResult> inline_result = client_->MatMul(*ta, *b);
  ASSERT_TRUE(inline_result.ok()) << inline_result.status();
  EXPECT_FALSE(inline_result->kept());
  EXPECT_EQ(inline_result->report.upload_us() >= 0, true);
  for (int64_t i = 0; i < 9 * 6; ++i) {
    EXPECT_NEAR(inline_result->output.at(i / 6, i % 6), want[i], 1e-12);
  }

  // Chain on the server: MatMul (kept) -> Transpose (kept) -> Reduce per row.
  absl::StatusOr<Tensor> tb = client_->Upload(*b);
  ASSERT_TRUE(tb.ok());
  absl::StatusOr<OpResult> c = client_->MatMul(
      *ta, *tb, MatMulOptions{.variant = "", .allow_tf32 = false, .keep = true, .ttl_seconds = 60});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->kept());
  EXPECT_EQ(c->output.elements(), 0);
  EXPECT_EQ(c->report.upload_us(), 0);  // both operands resident
  EXPECT_EQ(c->report.download_us(), 0);
  EXPECT_EQ(c->tensor.rows(), 9);
  EXPECT_EQ(c->tensor.cols(), 6);
  absl::StatusOr<Matrix> c_back = c->tensor.Download();
  ASSERT_TRUE(c_back.ok()) << c_back.status();
  for (int64_t i = 0; i < 9 * 6; ++i) EXPECT_NEAR(c_back->at(i / 6, i % 6), want[i], 1e-12);

  absl::StatusOr<OpResult> ct =
      client_->Transpose(c->tensor, OpOptions{.variant = "", .keep = true, .ttl_seconds = 0});
  ASSERT_TRUE(ct.ok()) << ct.status();
  ASSERT_TRUE(ct->kept());
  EXPECT_EQ(ct->tensor.rows(), 6);
  absl::StatusOr<OpResult> sums =
      client_->Reduce(ct->tensor, v1::REDUCE_OP_SUM, v1::REDUCE_AXIS_PER_ROW, OpOptions{});
  ASSERT_TRUE(sums.ok()) << sums.status();
  ASSERT_EQ(sums->output.ShapeString(), "6x1 float64");
  for (int64_t j = 0; j < 6; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 9; ++i) s += want[i * 6 + j];
    EXPECT_NEAR(sums->output.at(j, 0), s, 1e-11);
  }
  // By id alone, as the CLI's @ID.
  absl::StatusOr<OpResult> by_id =
      client_->Reduce(Operand::TensorId(ta->id()), v1::REDUCE_OP_MAX, v1::REDUCE_AXIS_ALL);
  ASSERT_TRUE(by_id.ok()) << by_id.status();
  double mx = -1e300;
  for (int64_t i = 0; i < a->elements(); ++i) mx = std::max(mx, a->at(i / 5, i % 5));
  EXPECT_EQ(by_id->output.at(0, 0), mx);

  EXPECT_EQ(Held(), 4);  // a, b, c, c transposed; all released by their handles
  absl::StatusOr<OpResult> missing = client_->Transpose(Operand::TensorId("0123@nowhere"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

// ----------------------------------------------------------------- CLI --

using CliRun = testing::CommandResult;

CliRun RunCli(const std::string& args) {
  return testing::RunCommand(absl::StrCat(GPUCOMPUTE_CLI, " ", args));
}

// The value after `label` at the start of a line ("id        ID").
std::string Field(const std::string& output, const std::string& label) {
  size_t at = output.rfind("\n" + label + " ");
  at = at == std::string::npos ? (output.rfind(label + " ", 0) == 0 ? 0 : std::string::npos)
                               : at + 1;
  if (at == std::string::npos) return "";
  size_t start = output.find_first_not_of(' ', at + label.size());
  return output.substr(start, output.find_first_of(" \n", start) - start);
}

TEST_F(ClientTensorTest, CliUploadMatMulKeepDownload) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("client_tensor_test_", getpid());
  std::filesystem::create_directories(dir);
  const std::string server = absl::StrCat(" --server=", server_->target());
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat32, 11, 7, 5);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat32, 7, 3, 6);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(WriteNpy((dir / "a.npy").string(), *a).ok());
  ASSERT_TRUE(WriteNpy((dir / "b.npy").string(), *b).ok());

  CliRun up_a =
      RunCli(absl::StrCat("upload ", (dir / "a.npy").string(), " --chunk_bytes=13", server));
  ASSERT_EQ(up_a.exit_code, 0) << up_a.output;
  EXPECT_THAT(up_a.output, HasSubstr("11x7 float32 (308 bytes)"));
  const std::string id_a = Field(up_a.output, "id");
  CliRun up_b = RunCli(absl::StrCat("upload ", (dir / "b.npy").string(), " --ttl=60", server));
  ASSERT_EQ(up_b.exit_code, 0) << up_b.output;
  const std::string id_b = Field(up_b.output, "id");
  ASSERT_FALSE(id_a.empty());
  ASSERT_FALSE(id_b.empty());

  CliRun list = RunCli("tensors" + server);
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_THAT(list.output, HasSubstr(id_a));
  EXPECT_THAT(list.output, HasSubstr("2 tensors"));

  CliRun mm = RunCli(absl::StrCat("matmul @", id_a, " @", id_b, " --keep", server));
  ASSERT_EQ(mm.exit_code, 0) << mm.output;
  EXPECT_THAT(mm.output, HasSubstr("upload 0 us"));
  const std::string id_c = Field(mm.output, "kept");
  ASSERT_FALSE(id_c.empty()) << mm.output;
  EXPECT_THAT(mm.output, HasSubstr("11x3 float32"));

  // A kept transpose of a tensor and an inline matrix mixed with a tensor.
  CliRun tr = RunCli(absl::StrCat("transpose @", id_c, server));
  ASSERT_EQ(tr.exit_code, 0) << tr.output;
  EXPECT_THAT(tr.output, HasSubstr("result    3x11 float32"));
  CliRun mixed = RunCli(absl::StrCat("matmul ", (dir / "a.npy").string(), " @", id_b, server));
  ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
  CliRun both = RunCli(absl::StrCat("matmul @", id_a, " @", id_b, " --keep --out=x.npy", server));
  EXPECT_EQ(both.exit_code, 2) << both.output;

  const std::string out = (dir / "c.npy").string();
  CliRun down = RunCli(absl::StrCat("download ", id_c, " ", out, " --release", server));
  ASSERT_EQ(down.exit_code, 0) << down.output;
  absl::StatusOr<Matrix> c = ReadNpy(out);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->ShapeString(), "11x3 float32");
  const std::vector<double> want = Product(*a, *b);
  for (int64_t i = 0; i < 11 * 3; ++i) {
    EXPECT_NEAR(c->at(i / 3, i % 3), want[i], 1e-5 * std::max(1.0, std::abs(want[i])));
  }

  CliRun gone = RunCli(absl::StrCat("download ", id_c, " ", out, server));
  EXPECT_EQ(gone.exit_code, 1) << gone.output;
  EXPECT_THAT(gone.output, HasSubstr("NOT_FOUND"));
  CliRun release = RunCli(absl::StrCat("release ", id_a, " @", id_b, server));
  EXPECT_EQ(release.exit_code, 0) << release.output;
  EXPECT_THAT(release.output, HasSubstr("released  2 of 2"));
  CliRun again = RunCli(absl::StrCat("release ", id_a, server));
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_EQ(RunCli("download only-one-arg" + server).exit_code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpucompute
