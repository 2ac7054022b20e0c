// The `gpucompute` binary end to end against an in-process fake server:
// exit codes, output, --out files and the token flag.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpucompute/matrix.h"
#include "gpucompute/npy.h"
#include "support/fake_compute_service.h"
#include "support/run_command.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

using CliRun = testing::CommandResult;

// A 1-D float64 .npy file, as numpy.save writes one.
void WriteNpy1D(const std::string& path, const std::vector<double>& values) {
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" +
                       std::to_string(values.size()) + ",), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const char length[2] = {static_cast<char>(header.size() & 0xff),
                          static_cast<char>(header.size() >> 8)};
  out.write(length, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(double)));
}

CliRun RunCli(const std::string& args) {
  return testing::RunCommand(std::string(GPUCOMPUTE_CLI) + " " + args);
}

// How many times `what` occurs in `text` (e.g. one "round trip" per timed call).
size_t Occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_ = testing::FakeServer::Start();
    ASSERT_NE(fake_, nullptr);
    server_ = " --server=" + fake_->address;
  }
  std::unique_ptr<testing::FakeServer> fake_;
  std::string server_;
};

TEST(CliUsageTest, HelpAndUsageErrors) {
  CliRun help = RunCli("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("usage: gpucompute COMMAND"));

  CliRun matmul_help = RunCli("matmul --help");
  EXPECT_EQ(matmul_help.exit_code, 0);
  EXPECT_THAT(matmul_help.output, HasSubstr("--random MxKxN generates a as MxK"));
  EXPECT_THAT(matmul_help.output, HasSubstr("--token_file=FILE"));

  EXPECT_EQ(RunCli("").exit_code, 2);
  CliRun unknown_command = RunCli("frobnicate");
  EXPECT_EQ(unknown_command.exit_code, 2);
  EXPECT_THAT(unknown_command.output, HasSubstr("unknown command 'frobnicate'"));

  CliRun unknown_flag = RunCli("matmul --bogus=1");
  EXPECT_EQ(unknown_flag.exit_code, 2);
  EXPECT_THAT(unknown_flag.output, HasSubstr("unknown flag --bogus"));

  CliRun bad_shape = RunCli("matmul --random 3x4");
  EXPECT_EQ(bad_shape.exit_code, 2);
  EXPECT_THAT(bad_shape.output, HasSubstr("--random: expected 3 dimensions (MxKxN"));

  CliRun missing = RunCli("transpose " + ::testing::TempDir() + "/no-such.npy");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.output, HasSubstr("no-such.npy"));

  CliRun bad_op = RunCli("reduce --random 4x4 --op median");
  EXPECT_EQ(bad_op.exit_code, 2);
  EXPECT_THAT(bad_op.output, HasSubstr("--op: expected sum, min, max or mean, got 'median'"));

  CliRun bad_axis = RunCli("reduce --random 4x4 --axis diagonal");
  EXPECT_EQ(bad_axis.exit_code, 2);
  EXPECT_THAT(bad_axis.output,
              HasSubstr("--axis: expected all, per_row or per_column, got 'diagonal'"));

  CliRun profile_help = RunCli("profile --help");
  EXPECT_EQ(profile_help.exit_code, 0);
  EXPECT_THAT(profile_help.output, HasSubstr("matmul:            MxKxN  (a is M x K, b is K x N"));
  EXPECT_THAT(profile_help.output, HasSubstr("MxKxN for matmul, MxN otherwise"));

  CliRun profile_shape = RunCli("profile --op matmul --shape 8x8");
  EXPECT_EQ(profile_shape.exit_code, 2);
  EXPECT_THAT(profile_shape.output,
              HasSubstr("--shape: expected 3 dimensions (MxKxN, e.g. 512x256x128), got '8x8'"));
  CliRun profile_op = RunCli("profile --op conv --shape 8x8");
  EXPECT_EQ(profile_op.exit_code, 2);
  EXPECT_THAT(profile_op.output,
              HasSubstr("--op: expected matmul, transpose or reduce, got 'conv'"));
  CliRun profile_no_shape = RunCli("profile --op transpose");
  EXPECT_EQ(profile_no_shape.exit_code, 2);
  EXPECT_THAT(profile_no_shape.output, HasSubstr("--shape=MxN is required"));
  CliRun profile_warmup = RunCli("profile --shape 2x2x2 --warmup 3000000000");
  EXPECT_EQ(profile_warmup.exit_code, 2);
  EXPECT_THAT(profile_warmup.output, HasSubstr("--warmup: expected an integer >= 0 and <= "
                                               "2147483647, got '3000000000'"));

  CliRun stray = RunCli("info extra");
  EXPECT_EQ(stray.exit_code, 2);
}

TEST_F(CliTest, MatMulRandomWritesResult) {
  const std::string out = ::testing::TempDir() + "/cli_c.npy";
  CliRun run = RunCli("matmul --random 3x4x5 --dtype float64 --seed 9 --out " + out + server_);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output,
              HasSubstr("a 3x4 float64 (random, seed 9) @ b 4x5 float64 (random, seed 10)"));
  EXPECT_THAT(run.output, HasSubstr("variant   fake_naive"));
  EXPECT_THAT(run.output, HasSubstr("compute 3 us"));

  absl::StatusOr<Matrix> c = ReadNpy(out);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->ShapeString(), "3x5 float64");
  absl::StatusOr<Matrix> a = Matrix::Random(DType::kFloat64, 3, 4, 9);
  absl::StatusOr<Matrix> b = Matrix::Random(DType::kFloat64, 4, 5, 10);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      double ref = 0;
      for (int p = 0; p < 4; ++p) ref += a->at(i, p) * b->at(p, j);
      EXPECT_NEAR(c->at(i, j), ref, 1e-12);
    }
  }
}

TEST_F(CliTest, RandomInputsPastTheServersLimitAreRefusedBeforeTheyAreBuilt) {
  // The fake server takes matrices up to 1 GiB; a would be 3.2 GB: refused
  // from GetServerInfo's answer, without the gigabytes or a MatMul call.
  CliRun run = RunCli("matmul --random 20000x20000x8 --dtype float64" + server_);
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--random: a would be 20000x20000 float64, 3200000000 bytes, "
                                    "more than the server's max_matrix_bytes (1073741824); "
                                    "nothing was sent"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("matmul    a")));
  // Within the limit, a large input is built and sent as before.
  CliRun fits = RunCli("transpose --random 4200x4200" + server_);  // 70.6 MB: asked, then sent
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

// The limit could not be asked: GetServerInfo's own failure is a failed call
// (exit 1), whatever its code, not a usage error; nothing is built or sent.
TEST_F(CliTest, AFailedLimitQueryIsAFailedCall) {
  fake_->service.set_server_info_status(
      grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "too many calls"));
  CliRun run = RunCli("matmul --random 20000x20000x8 --dtype float64" + server_);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("too many calls"));
  EXPECT_THAT(run.output, ::testing::Not(HasSubstr("matmul    a")));
}

// --busy_poll: the same call and result, each of --repeat's calls timed.
TEST_F(CliTest, BusyPollRepeatsTheCall) {
  const std::string out = ::testing::TempDir() + "/cli_bp.npy";
  CliRun run =
      RunCli("matmul --random 3x4x5 --seed 9 --repeat 3 --busy_poll --out " + out + server_);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(Occurrences(run.output, "round trip"), 3u) << run.output;
  absl::StatusOr<Matrix> c = ReadNpy(out);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ShapeString(), "3x5 float32");
}

TEST_F(CliTest, MatMulFilesAndServerError) {
  const std::string a = ::testing::TempDir() + "/cli_a.npy";
  const std::string b = ::testing::TempDir() + "/cli_b.npy";
  ASSERT_TRUE(WriteNpy(a, *Matrix::Random(DType::kFloat32, 2, 3, 1)).ok());
  ASSERT_TRUE(WriteNpy(b, *Matrix::Random(DType::kFloat32, 4, 2, 2)).ok());
  CliRun run = RunCli("matmul " + a + " " + b + server_);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("MatMul failed: INVALID_ARGUMENT: a.cols 3 != b.rows 4"));

  CliRun ok = RunCli("matmul " + b + " " + a + server_);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("result    4x3 float32"));

  CliRun dtype = RunCli("matmul " + b + " " + a + " --dtype float64" + server_);
  EXPECT_EQ(dtype.exit_code, 2);
  EXPECT_THAT(dtype.output, HasSubstr("--dtype applies to --random inputs only"));
}

TEST_F(CliTest, ReduceTransposeInfoProfileHealth) {
  CliRun reduce = RunCli("reduce --random 10x10 --op sum --axis all" + server_);
  EXPECT_EQ(reduce.exit_code, 0) << reduce.output;
  EXPECT_THAT(reduce.output, HasSubstr("result    1x1 float32"));

  CliRun transpose = RunCli("transpose --random 2x7 --variant shared_padded" + server_);
  EXPECT_EQ(transpose.exit_code, 0) << transpose.output;
  EXPECT_THAT(transpose.output, HasSubstr("variant   shared_padded"));
  EXPECT_THAT(transpose.output, HasSubstr("result    7x2 float32"));

  CliRun repeated = RunCli("transpose --random 3x5 --repeat 3" + server_);
  EXPECT_EQ(repeated.exit_code, 0) << repeated.output;
  EXPECT_EQ(Occurrences(repeated.output, "round trip"), 3u) << repeated.output;
  EXPECT_THAT(repeated.output, HasSubstr("result    5x3 float32"));
  CliRun no_repeat = RunCli("transpose --random 3x5 --repeat 0" + server_);
  EXPECT_EQ(no_repeat.exit_code, 2) << no_repeat.output;
  EXPECT_THAT(no_repeat.output, HasSubstr("--repeat: expected an integer >= 1, got '0'"));

  CliRun info = RunCli("info" + server_);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_THAT(info.output, HasSubstr("version     fake-1"));
  EXPECT_THAT(info.output, HasSubstr("fake_naive"));

  // MxKxN, as matmul --random takes it: a is 64x32, b is 32x16.
  CliRun profile = RunCli("profile --op matmul --shape 64x32x16 --dtype f64" + server_);
  EXPECT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_THAT(profile.output,
              HasSubstr("matmul float64  64x32x16 (a 64x32 @ b 32x16; m=64 k=32 n=16)"));
  const v1::ProfileRequest sent = fake_->service.last_profile_request();
  EXPECT_EQ(sent.op(), v1::OP_MATMUL);
  EXPECT_EQ(sent.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(sent.m(), 64);
  EXPECT_EQ(sent.k(), 32);
  EXPECT_EQ(sent.n(), 16);
  EXPECT_THAT(profile.output, HasSubstr("fake_broken  result differs from the reference"));
  EXPECT_THAT(profile.output, HasSubstr("selected  fake_fast"));

  CliRun profile_reduce =
      RunCli("profile --op reduce --shape 30x20 --reduce_op max --reduce_axis per_row --warmup 1" +
             server_);
  EXPECT_EQ(profile_reduce.exit_code, 0) << profile_reduce.output;
  EXPECT_THAT(profile_reduce.output, HasSubstr("reduce float32  30x20  max per_row"));
  const v1::ProfileRequest reduce_sent = fake_->service.last_profile_request();
  EXPECT_EQ(reduce_sent.m(), 30);
  EXPECT_EQ(reduce_sent.n(), 20);
  EXPECT_EQ(reduce_sent.k(), 0);
  EXPECT_EQ(reduce_sent.reduce_op(), v1::REDUCE_OP_MAX);
  EXPECT_EQ(reduce_sent.reduce_axis(), v1::REDUCE_AXIS_PER_ROW);
  EXPECT_EQ(reduce_sent.warmup(), 1);

  CliRun echo = RunCli("echo --payload_bytes 100 --response_bytes 70 --count 3" + server_);
  EXPECT_EQ(echo.exit_code, 0) << echo.output;
  EXPECT_THAT(echo.output, HasSubstr("3 echoes of 100 bytes out and 70 back"));
  EXPECT_EQ(RunCli("echo --count 0" + server_).exit_code, 2);

  CliRun health = RunCli("health" + server_);
  EXPECT_EQ(health.exit_code, 0) << health.output;
  EXPECT_THAT(health.output, HasSubstr("SERVING"));

  fake_->server->GetHealthCheckService()->SetServingStatus("gpucompute.v1.Compute", false);
  CliRun not_serving = RunCli("health --service gpucompute.v1.Compute" + server_);
  EXPECT_EQ(not_serving.exit_code, 1);
  EXPECT_THAT(not_serving.output, HasSubstr("NOT_SERVING"));
}

// A transpose ladder as a CUDA server reports it: three rows, two
// comparisons, one fraction above the ceiling with the server's note.
v1::ProfileResponse CannedLadder() {
  v1::ProfileResponse r;
  auto add = [&](const std::string& name, double us, double fraction, const std::string& note) {
    v1::VariantProfile* v = r.add_variants();
    v->set_variant(name);
    v->set_ok(true);
    v->set_median_us(us);
    v->set_gbytes_per_s(8000 / us);
    v->set_fraction_of_roofline(fraction);
    v->set_note(note);
  };
  add("shared_padded", 4, 1.2, "above the measured ceiling: <busy> & \"suspect\"");
  add("shared", 5, 0.96, "");
  add("naive", 10, 0.48, "");
  v1::VariantProfile* broken = r.add_variants();
  broken->set_variant("shared_swizzled");
  broken->set_error("result differs from the reference at (0, 0)");
  auto compare = [&](const std::string& idea, const std::string& before, const std::string& after,
                     double ratio) {
    v1::Comparison* c = r.add_comparisons();
    c->set_idea(idea);
    c->set_lesson("the lesson of " + idea);
    c->set_before(before);
    c->set_after(after);
    c->set_time_ratio(ratio);
  };
  compare("coalescing", "naive", "shared", 2.0);
  compare("bank conflicts", "shared", "shared_padded", 1.25);
  r.set_selected("shared_padded");
  r.set_device("cuda:0 Fake GPU");
  r.set_peak_gbytes_per_s(4000);
  r.set_peak_read_gbytes_per_s(4500);
  r.set_peak_gflops(60000);
  r.set_seed(42);
  return r;
}

TEST_F(CliTest, ProfileWarmCacheAsksForWarmRuns) {
  v1::ProfileResponse cold = CannedLadder();
  cold.set_cold_cache(true);
  fake_->service.set_profile_response(cold);
  CliRun profile = RunCli("profile --op transpose --shape 100x100 --warm_cache" + server_);
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_TRUE(fake_->service.last_profile_request().warm_cache());
  EXPECT_THAT(profile.output, HasSubstr("caches    cold: flushed before each timed run"));
}

TEST_F(CliTest, ProfileComparisonsAndHtml) {
  fake_->service.set_profile_response(CannedLadder());
  const std::string html_path = ::testing::TempDir() + "/cli_profile.html";
  std::remove(html_path.c_str());
  CliRun profile =
      RunCli("profile --op transpose --shape 1000x1000 --counters --html " + html_path + server_);
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_TRUE(fake_->service.last_profile_request().counters());
  EXPECT_FALSE(fake_->service.last_profile_request().warm_cache());
  // The canned response leaves cold_cache unset: warm runs.
  EXPECT_THAT(profile.output, HasSubstr("caches    warm: each timed run follows the previous one"));
  // The comparisons under the variants: idea, before -> after, time ratio.
  const size_t variants_at = profile.output.find("naive  ");
  const size_t comparisons_at = profile.output.find("comparisons (");
  ASSERT_NE(comparisons_at, std::string::npos) << profile.output;
  EXPECT_LT(variants_at, comparisons_at) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("coalescing      naive -> shared"));
  EXPECT_THAT(profile.output, HasSubstr("2.00x  the lesson of coalescing"));
  EXPECT_THAT(profile.output, HasSubstr("shared -> shared_padded"));
  EXPECT_THAT(profile.output, HasSubstr("1.25x"));
  EXPECT_THAT(profile.output, HasSubstr("notes:\n  shared_padded  above the measured ceiling"));
  EXPECT_THAT(profile.output, HasSubstr("read-only 4500.0 GB/s"));
  EXPECT_THAT(profile.output, HasSubstr("html      " + html_path));

  std::ifstream in(html_path);
  ASSERT_TRUE(in.good()) << html_path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string html = text.str();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_THAT(html, HasSubstr("</html>"));
  for (const char* name : {"shared_padded", "shared", "naive", "shared_swizzled"}) {
    EXPECT_THAT(html, HasSubstr(std::string(">") + name + "<")) << name;
  }
  EXPECT_THAT(html, HasSubstr("coalescing"));
  EXPECT_THAT(html, HasSubstr("naive &rarr; shared"));
  EXPECT_THAT(html, HasSubstr("the lesson of bank conflicts"));
  EXPECT_THAT(html, HasSubstr("1.25x"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("cuda:0 Fake GPU"));
  EXPECT_THAT(html, HasSubstr("4000.0 GB/s"));
  EXPECT_THAT(html, HasSubstr("(ceiling suspect)"));
  // Escaped, and self-contained: nothing to fetch, no script.
  EXPECT_THAT(html, HasSubstr("&lt;busy&gt; &amp; &quot;suspect&quot;"));
  for (const char* external :
       {"http:", "https:", "//", "src=", "href=", "@import", "url(", "<script", "<link"}) {
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  }

  CliRun unwritable = RunCli("profile --op transpose --shape 8x8 --html " + ::testing::TempDir() +
                             "/no-such-dir/p.html" + server_);
  EXPECT_EQ(unwritable.exit_code, 1) << unwritable.output;
  EXPECT_THAT(unwritable.output, HasSubstr("--html: cannot open"));
}

// A 1-D .npy file is one row (1 x N), as the Python client sends a 1-D array.
TEST_F(CliTest, OneDimensionalNpyIsOneRow) {
  const std::string v = ::testing::TempDir() + "/cli_v.npy";
  const std::string b = ::testing::TempDir() + "/cli_b3x2.npy";
  WriteNpy1D(v, {1.0, 2.0, 3.0});
  const std::vector<double> b_values = {1, 0, 0, 1, 1, 1};
  ASSERT_TRUE(WriteNpy(b, *Matrix::FromValues<double>(3, 2, b_values)).ok());

  CliRun transpose = RunCli("transpose " + v + server_);
  EXPECT_EQ(transpose.exit_code, 0) << transpose.output;
  EXPECT_THAT(transpose.output, HasSubstr("transpose 1x3 float64"));
  EXPECT_THAT(transpose.output, HasSubstr("result    3x1 float64"));

  const std::string out = ::testing::TempDir() + "/cli_vb.npy";
  CliRun matmul = RunCli("matmul " + v + " " + b + " --out " + out + server_);
  EXPECT_EQ(matmul.exit_code, 0) << matmul.output;
  EXPECT_THAT(matmul.output, HasSubstr("a 1x3 float64"));
  absl::StatusOr<Matrix> c = ReadNpy(out);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->ShapeString(), "1x2 float64");
  EXPECT_EQ(c->at(0, 0), 4.0);  // [1 2 3] @ [[1 0] [0 1] [1 1]]
  EXPECT_EQ(c->at(0, 1), 5.0);
}

TEST_F(CliTest, TokenFileIsSent) {
  const std::string token = ::testing::TempDir() + "/cli_token";
  std::ofstream(token) << "tok-123\n";
  CliRun run = RunCli("info --token_file " + token + server_);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(fake_->service.last_authorization(), "Bearer tok-123");
}

TEST(CliUnreachableTest, RpcErrorExitsOne) {
  std::string address;
  {
    auto fake = testing::FakeServer::Start();
    ASSERT_NE(fake, nullptr);
    address = fake->address;
  }
  CliRun health = RunCli("health --deadline_ms 2000 --server=" + address);
  EXPECT_EQ(health.exit_code, 1);
  EXPECT_THAT(health.output, HasSubstr("Health failed: UNAVAILABLE"));
}

}  // namespace
}  // namespace gpucompute
