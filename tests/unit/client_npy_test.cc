// .npy reading and writing: round trips, NumPy's exact byte layout, and a
// clear rejection of every kind of malformed file.
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gpucompute/matrix.h"
#include "gpucompute/npy.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

// Written by numpy 2.4 (np.save into a BytesIO); the header layout,
// including the spare room numpy leaves for the first dimension, must match.
// numpy.save(f, numpy.array([[1, 2, 3], [4, 5, 6]], dtype='<f4'))
const std::string kNumpy2x3Float32 =
    std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }     "
    "                                                     \x0a" +
    std::string("\x00\x00\x80\x3f\x00\x00\x00@\x00\x00@@\x00\x00\x80@\x00\x00\xa0@\x00\x00\xc0@",
                24);
// numpy.save(f, numpy.array([0.5, -1.25, 3.0], dtype='<f8'))
const std::string kNumpy1DFloat64 =
    std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
    "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }       "
    "                                                     \x0a" +
    std::string(
        "\x00\x00\x00\x00\x00\x00\xe0\x3f\x00\x00\x00\x00\x00\x00\xf4\xbf\x00\x00\x00\x00\x00\x00"
        "\x08@",
        24);

// The process id in the name: test runs that share a temporary directory
// (two builds' CTest at once) must not write each other's files.
std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/npy_test_" + std::to_string(getpid()) + "_" + name;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

uint64_t FreshSeed() {
  static const uint64_t seed = std::random_device()();
  return seed;
}

template <typename T>
void ExpectRoundTrip(int64_t rows, int64_t cols) {
  SCOPED_TRACE(::testing::Message() << rows << "x" << cols << " " << DTypeName(DTypeOf<T>::value)
                                    << " seed " << FreshSeed());
  absl::StatusOr<Matrix> m = Matrix::Random(DTypeOf<T>::value, rows, cols, FreshSeed() + rows);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string path = TempPath("roundtrip.npy");
  ASSERT_TRUE(WriteNpy(path, *m).ok());
  absl::StatusOr<Matrix> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->dtype(), m->dtype());
  EXPECT_EQ(back->rows(), rows);
  EXPECT_EQ(back->cols(), cols);
  EXPECT_EQ(back->bytes(), m->bytes());  // bit-exact
  // The whole file is a multiple of 64 bytes of header plus the data.
  const std::string file = ReadFileBytes(path);
  EXPECT_EQ((file.size() - m->bytes().size()) % 64, 0u);
}

TEST(NpyTest, RoundTripsFloat32AndFloat64AtOddShapes) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {1, 7}, {7, 1}, {33, 17}, {3, 1000}, {1000, 3}, {128, 128}, {511, 1}};
  for (auto [r, c] : shapes) {
    ExpectRoundTrip<float>(r, c);
    ExpectRoundTrip<double>(r, c);
    ExpectRoundTrip<Float16>(r, c);
    ExpectRoundTrip<BFloat16>(r, c);
  }
}

TEST(NpyTest, RoundTripsEmptyAndLargeFirstDimension) {
  ExpectRoundTrip<float>(0, 5);
  ExpectRoundTrip<double>(1234567, 1);
}

TEST(NpyTest, WritesExactlyWhatNumpyWrites) {
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  absl::StatusOr<Matrix> m = Matrix::FromValues<float>(2, 3, values);
  ASSERT_TRUE(m.ok());
  const std::string path = TempPath("numpy_identical.npy");
  ASSERT_TRUE(WriteNpy(path, *m).ok());
  EXPECT_EQ(ReadFileBytes(path), kNumpy2x3Float32);
  EXPECT_EQ(NpyHeader(DType::kFloat32, 2, 3), kNumpy2x3Float32.substr(0, 128));
}

TEST(NpyTest, HeaderIsPaddedLikeNumpyForEveryWidth) {
  // numpy: dict + spaces for 21 digits of the first dimension, then padding
  // to 64 bytes, a whole extra block when already aligned, then '\n'.
  for (int64_t rows : {1LL, 12LL, 123456789012LL, 999999999999999999LL}) {
    const std::string h = NpyHeader(DType::kFloat64, rows, 3);
    EXPECT_EQ(h.size() % 64, 0u) << rows;
    EXPECT_EQ(h.back(), '\n');
    const size_t declared =
        static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
    EXPECT_EQ(declared + 10, h.size());
  }
}

TEST(NpyTest, ReadsNumpyFiles) {
  absl::StatusOr<Matrix> m = ParseNpy(kNumpy2x3Float32);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ShapeString(), "2x3 float32");
  EXPECT_EQ(m->at(1, 2), 6.0);

  absl::StatusOr<Matrix> v = ParseNpy(kNumpy1DFloat64);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->ShapeString(), "1x3 float64");  // 1-D reads as one row
  EXPECT_EQ(v->values<double>()[1], -1.25);
}

// A file with the given dict as its header, padded the numpy way, and
// `data_bytes` bytes of data.
std::string MakeNpy(const std::string& dict, size_t data_bytes, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + header + std::string(data_bytes, '\x01');
}

const char kGoodDict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

// What numpy writes for np.float16 and for ml_dtypes.bfloat16 (a 2-byte
// void, '<V2'), and the 2-byte void spelled without a byte order.
TEST(NpyTest, SixteenBitDescriptors) {
  EXPECT_NE(NpyHeader(DType::kFloat16, 2, 3).find("'descr': '<f2'"), std::string::npos);
  EXPECT_NE(NpyHeader(DType::kBFloat16, 2, 3).find("'descr': '<V2'"), std::string::npos);
  for (const char* descr : {"<f2", "<V2", "|V2"}) {
    absl::StatusOr<Matrix> m = ParseNpy(MakeNpy(
        absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (2, 3), }"), 12));
    ASSERT_TRUE(m.ok()) << descr << ": " << m.status();
    EXPECT_EQ(m->dtype(), descr[1] == 'f' ? DType::kFloat16 : DType::kBFloat16) << descr;
    EXPECT_EQ(m->byte_size(), 12);
  }
  // 0x3c00 is 1.0 in FP16, 0x3f80 1.0 in BF16.
  const std::vector<Float16> h = {{0x3c00}, {0xc000}};
  absl::StatusOr<Matrix> hm = Matrix::FromValues<Float16>(1, 2, h);
  ASSERT_TRUE(hm.ok());
  EXPECT_EQ(hm->at(0, 0), 1.0);
  EXPECT_EQ(hm->at(0, 1), -2.0);
  const std::vector<BFloat16> b = {{0x3f80}};
  EXPECT_EQ(Matrix::FromValues<BFloat16>(1, 1, b)->at(0, 0), 1.0);
}

TEST(NpyTest, AcceptsVersion2AndOtherValidSpellings) {
  absl::StatusOr<Matrix> v2 = ParseNpy(MakeNpy(kGoodDict, 24, 2));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->ShapeString(), "2x3 float32");
  // Key order is free, double quotes and Python 2 long literals occur in old files.
  absl::StatusOr<Matrix> other =
      ParseNpy(MakeNpy("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<f8\"}", 48));
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->ShapeString(), "2x3 float64");
}

struct Malformed {
  std::string name;
  std::string bytes;
  std::string message;
};

TEST(NpyTest, RejectsMalformedFilesWithClearErrors) {
  const std::string good = MakeNpy(kGoodDict, 24);
  std::string bad_version = good;
  bad_version[6] = 3;
  std::string bad_minor = good;
  bad_minor[7] = 1;
  std::string long_header_len = good;
  long_header_len[8] = '\xff';
  long_header_len[9] = '\x7f';
  const std::vector<Malformed> cases = {
      {"empty", "", "bad magic"},
      {"not npy", "PK\x03\x04 a zip file, not an array", "bad magic"},
      {"magic only", std::string("\x93NUMPY", 6), "truncated .npy file"},
      {"version 3.0", bad_version, "unsupported .npy format version 3.0"},
      {"version 1.1", bad_minor, "unsupported .npy format version 1.1"},
      {"no header length", good.substr(0, 9), "truncated header length"},
      {"truncated header", good.substr(0, 40), "truncated .npy header"},
      {"header length past end", long_header_len, "truncated .npy header: it declares 32767"},
      {"header not a dict", MakeNpy("['descr', '<f4']", 24), "header is not a dict"},
      {"fortran order", MakeNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24),
       "Fortran (column-major) order"},
      {"big-endian f4", MakeNpy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24),
       "unsupported dtype '>f4' (big-endian)"},
      {"int32", MakeNpy("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }", 24),
       "unsupported dtype '<i4'"},
      {"int16", MakeNpy("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }", 12),
       "unsupported dtype '<i2' (expected '<f4' float32, '<f8' float64, '<f2' float16, '<V2' "
       "bfloat16)"},
      {"4-byte void", MakeNpy("{'descr': '<V4', 'fortran_order': False, 'shape': (2, 3), }", 24),
       "unsupported dtype '<V4'"},
      {"structured dtype",
       MakeNpy("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", 24),
       "structured dtypes are not supported"},
      {"3-D shape", MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 96),
       "shape (2, 3, 4) has 3 dimensions"},
      {"0-D shape", MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4),
       "shape () has 0 dimensions"},
      {"negative dim", MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 0),
       "negative dimension"},
      {"overflowing shape",
       MakeNpy("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 0),
       "overflows int64"},
      {"data short", MakeNpy(kGoodDict, 23),
       "data is 23 bytes but shape (2, 3) float32 needs 24 (file truncated)"},
      {"data long", MakeNpy(kGoodDict, 25),
       "data is 25 bytes but shape (2, 3) float32 needs 24 (trailing bytes"},
      {"missing key", MakeNpy("{'descr': '<f4', 'shape': (2, 3), }", 24),
       "lacks the key 'fortran_order'"},
      {"extra key",
       MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", 24),
       "unexpected key 'x'"},
      {"repeated key",
       MakeNpy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", 24),
       "repeats the key 'descr'"},
      {"shape not a tuple", MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", 24),
       "'shape' is not a tuple"},
      {"shape of floats",
       MakeNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0, 3), }", 24),
       "shape tuple holds something other than integers"},
      {"unterminated dict", MakeNpy("{'descr': '<f4', 'fortran_order': False", 24),
       "expected ',' or '}'"},
      {"garbage after dict", MakeNpy(std::string(kGoodDict) + " xyz", 24),
       "unexpected text after the header dict"},
  };
  for (const Malformed& c : cases) {
    absl::StatusOr<Matrix> m = ParseNpy(c.bytes, "case.npy");
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.message)) << c.name;
    EXPECT_THAT(std::string(m.status().message()), HasSubstr("case.npy")) << c.name;
  }
}

TEST(NpyTest, FileErrorsNameThePath) {
  const std::string missing = TempPath("does-not-exist.npy");
  absl::StatusOr<Matrix> m = ReadNpy(missing);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(missing));

  const std::string truncated = TempPath("truncated.npy");
  WriteFileBytes(truncated, MakeNpy(kGoodDict, 10));
  m = ReadNpy(truncated);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr(truncated + ": data is 10 bytes but shape (2, 3) float32 needs 24"));

  absl::StatusOr<Matrix> ok = Matrix::Zeros(DType::kFloat32, 1, 1);
  absl::Status st = WriteNpy(TempPath("no-such-dir/out.npy"), *ok);
  EXPECT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("no-such-dir/out.npy"));
}

}  // namespace
}  // namespace gpucompute
