// Cross-checks the .npy code with NumPy itself when a python3 with numpy is
// around: NumPy reads our files and re-saves them byte for byte, and we read
// what NumPy writes. Skips (visibly) otherwise.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpucompute/matrix.h"
#include "gpucompute/npy.h"

namespace gpucompute {
namespace {

constexpr char kScript[] = R"(
import sys
import numpy as np
d = sys.argv[1]
for name, dtype, shape in [('f4_33x17', '<f4', (33, 17)), ('f8_1x1', '<f8', (1, 1)),
                           ('f8_1x9', '<f8', (1, 9)), ('f4_9x1', '<f4', (9, 1))]:
    path = f'{d}/{name}.npy'
    a = np.load(path)
    assert a.dtype == np.dtype(dtype), (path, a.dtype)
    assert a.shape == shape, (path, a.shape)
    expected = np.fromfile(f'{d}/{name}.raw', dtype=dtype).reshape(shape)
    assert np.array_equal(a, expected), path
    np.save(f'{d}/{name}.resaved.npy', a)
    assert open(path, 'rb').read() == open(f'{d}/{name}.resaved.npy', 'rb').read(), path
rng = np.random.default_rng(5)
np.save(f'{d}/np_1d.npy', rng.standard_normal(11))
np.save(f'{d}/np_f4.npy', rng.standard_normal((6, 4)).astype(np.float32))
np.save(f'{d}/np_fortran.npy', np.asfortranarray(rng.standard_normal((3, 5))))
np.save(f'{d}/np_int.npy', np.arange(6, dtype=np.int32))
np.save(f'{d}/np_3d.npy', np.zeros((2, 2, 2)))
np.save(f'{d}/np_be.npy', np.zeros((2, 2), dtype='>f8'))
rng.standard_normal(11).tofile(f'{d}/unused.raw')
np.save(f'{d}/np_1d_values.npy', np.load(f'{d}/np_1d.npy').reshape(1, 11))
)";

bool HaveNumpy() {
  return std::system(GPUCOMPUTE_PYTHON3 " -c \"import numpy\" > /dev/null 2>&1") == 0;
}

TEST(NumpyCrossCheckTest, NumpyAgreesWithUs) {
  if (std::string(GPUCOMPUTE_PYTHON3).empty() || !HaveNumpy()) {
    GTEST_SKIP() << "python3 with numpy not available; .npy cross-check skipped";
  }
  const std::string dir = ::testing::TempDir();
  struct Case {
    const char* name;
    DType dtype;
    int64_t rows, cols;
  };
  for (const Case& c :
       {Case{"f4_33x17", DType::kFloat32, 33, 17}, Case{"f8_1x1", DType::kFloat64, 1, 1},
        Case{"f8_1x9", DType::kFloat64, 1, 9}, Case{"f4_9x1", DType::kFloat32, 9, 1}}) {
    absl::StatusOr<Matrix> m = Matrix::Random(c.dtype, c.rows, c.cols, c.rows * 31 + c.cols);
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(WriteNpy(dir + "/" + c.name + ".npy", *m).ok());
    std::ofstream(dir + "/" + c.name + ".raw", std::ios::binary) << m->bytes();
  }
  const std::string script = dir + "/crosscheck.py";
  std::ofstream(script) << kScript;
  const std::string command = std::string(GPUCOMPUTE_PYTHON3) + " " + script + " " + dir;
  ASSERT_EQ(std::system(command.c_str()), 0) << "NumPy disagreed; see the assertion above";

  absl::StatusOr<Matrix> one_d = ReadNpy(dir + "/np_1d.npy");
  absl::StatusOr<Matrix> as_row = ReadNpy(dir + "/np_1d_values.npy");
  ASSERT_TRUE(one_d.ok()) << one_d.status();
  ASSERT_TRUE(as_row.ok()) << as_row.status();
  EXPECT_EQ(one_d->ShapeString(), "1x11 float64");
  EXPECT_EQ(one_d->bytes(), as_row->bytes());
  absl::StatusOr<Matrix> f4 = ReadNpy(dir + "/np_f4.npy");
  ASSERT_TRUE(f4.ok()) << f4.status();
  EXPECT_EQ(f4->ShapeString(), "6x4 float32");

  EXPECT_FALSE(ReadNpy(dir + "/np_fortran.npy").ok());
  EXPECT_FALSE(ReadNpy(dir + "/np_int.npy").ok());
  EXPECT_FALSE(ReadNpy(dir + "/np_3d.npy").ok());
  EXPECT_FALSE(ReadNpy(dir + "/np_be.npy").ok());
}

}  // namespace
}  // namespace gpucompute
