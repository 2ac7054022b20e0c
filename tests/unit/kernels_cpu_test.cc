// CPU variants against plain float64 loops written here, at odd shapes, on
// fresh random data, with outputs poisoned with NaN before each run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "gpucompute/kernels/check.h"
#include "gpucompute/kernels/ladder.h"
#include "gpucompute/kernels/reference.h"
#include "gpucompute/kernels/registry.h"
#include "support/test_util.h"

namespace gpucompute::kernels {
namespace {

using testing::FreshSeed;
using testing::RandomValues;

struct Shape {
  int64_t m, n, k;
};

const Shape kShapes[] = {{1, 1, 1},   {1, 37, 5},     {37, 1, 5},   {33, 17, 9},
                         {17, 33, 1}, {257, 129, 65}, {64, 64, 64}, {1000, 3, 7}};

// Independent float64 loops (not the library's reference) for each op.
// Reductions follow NumPy: MIN and MAX of a range holding a NaN are NaN; SUM
// and MEAN are IEEE sums (NaN in, NaN out; inf - inf is NaN).
std::vector<double> Expected(const Problem& p, const std::vector<double>& a,
                             const std::vector<double>& b) {
  std::vector<double> out;
  if (p.op == Op::kMatMul) {
    out.assign(p.m * p.n, 0);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < p.k; ++kk) s += a[i * p.k + kk] * b[kk * p.n + j];
        out[i * p.n + j] = s;
      }
  } else if (p.op == Op::kTranspose) {
    out.assign(p.m * p.n, 0);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) out[j * p.m + i] = a[i * p.n + j];
  } else {
    const int64_t groups = p.reduce_axis == ReduceAxis::kAll      ? 1
                           : p.reduce_axis == ReduceAxis::kPerRow ? p.m
                                                                  : p.n;
    const double init = p.reduce_op == ReduceOp::kMin   ? INFINITY
                        : p.reduce_op == ReduceOp::kMax ? -INFINITY
                                                        : 0;
    out.assign(groups, init);
    std::vector<bool> saw_nan(groups, false);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t g = p.reduce_axis == ReduceAxis::kAll      ? 0
                          : p.reduce_axis == ReduceAxis::kPerRow ? i
                                                                 : j;
        const double x = a[i * p.n + j];
        if (p.reduce_op == ReduceOp::kMin)
          out[g] = std::min(out[g], x);
        else if (p.reduce_op == ReduceOp::kMax)
          out[g] = std::max(out[g], x);
        else
          out[g] += x;
        if (std::isnan(x)) saw_nan[g] = true;
      }
    const double count = double(p.m) * double(p.n) / double(groups);
    for (int64_t g = 0; g < groups; ++g) {
      if (saw_nan[g]) out[g] = NAN;  // std::min/max alone would depend on where the NaN was
      if (p.reduce_op == ReduceOp::kMean) out[g] /= count;
    }
  }
  return out;
}

// NaN matches NaN; anything else must be within `tol` (exact when 0; an
// infinity only matches itself).
bool Matches(double got, double want, double tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= tol;
}

template <typename T>
void RunAndCompare(const Variant& v, const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> a = RandomValues<T>(InputAElements(p), rng);
  std::vector<T> b = RandomValues<T>(InputBElements(p), rng);
  std::vector<T> out(OutputElements(p), std::numeric_limits<T>::quiet_NaN());
  ASSERT_TRUE(v.launch(p, Buffers{a.data(), b.data(), out.data(), nullptr, 0}, {}).ok());

  const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
  const std::vector<double> expected = Expected(p, a64, b64);
  // The library's reference agrees with the loops above...
  const std::vector<double> reference = ReferenceResult(p, a.data(), b.data());
  ASSERT_EQ(reference.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(Matches(reference[i], expected[i], 1e-12 * (1 + std::fabs(expected[i]))))
        << "element " << i << ": reference " << reference[i] << ", expected " << expected[i];
  }
  // ...and the variant meets the contract against them.
  const CheckResult check =
      CheckAgainstReference(p, v.reduced_precision, a.data(), out.data(), expected);
  EXPECT_TRUE(check.ok) << check.message;
}

std::string Describe(const Problem& p, uint64_t seed) {
  return std::string(OpName(p.op)) + " " + DTypeName(p.dtype) + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " " +
         ReduceOpName(p.reduce_op) + " " + ReduceAxisName(p.reduce_axis) +
         " seed=" + std::to_string(seed) + " (rerun with GPUCOMPUTE_TEST_SEED)";
}

void CheckAllShapes(Op op, ReduceOp rop = ReduceOp::kSum, ReduceAxis axis = ReduceAxis::kAll) {
  const Variant* v = DefaultRegistry().Find(op, Backend::kCpu, "cpu_reference");
  ASSERT_NE(v, nullptr);
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : kShapes) {
      Problem p{op, dtype, s.m, s.n, s.k, rop, axis};
      const uint64_t seed = FreshSeed();
      SCOPED_TRACE(Describe(p, seed));
      if (dtype == DType::kFloat32)
        RunAndCompare<float>(*v, p, seed);
      else
        RunAndCompare<double>(*v, p, seed);
    }
  }
}

TEST(CpuKernels, MatMul) { CheckAllShapes(Op::kMatMul); }
TEST(CpuKernels, Transpose) { CheckAllShapes(Op::kTranspose); }

TEST(CpuKernels, ReduceEveryOpAndAxis) {
  for (ReduceOp rop : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kMean}) {
    for (ReduceAxis axis : {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn}) {
      CheckAllShapes(Op::kReduce, rop, axis);
    }
  }
}

TEST(CpuKernels, LargeMatMulUsesThreadsAndStaysExact) {
  // Big enough that the row bands run on several threads.
  const Variant* v = DefaultRegistry().Find(Op::kMatMul, Backend::kCpu, "cpu_reference");
  const uint64_t seed = FreshSeed();
  Problem p{Op::kMatMul, DType::kFloat32, 301, 257, 513};
  SCOPED_TRACE(Describe(p, seed));
  RunAndCompare<float>(*v, p, seed);
}

// ---- NaN and infinities in reductions (docs/contract.md: MIN and MAX propagate NaN as
// NumPy's min/max do; SUM and MEAN follow IEEE arithmetic).

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Elements of an otherwise random matrix replaced by special values.
struct Special {
  int64_t r, c;
  double v;
};

struct SpecialCase {
  std::string name;
  std::vector<Special> specials;
  bool fill = false;  // every element `fill_value` before `specials`
  double fill_value = 0;
};

// The cases every shape gets: a NaN first, in the middle and last; a NaN
// with -inf before it and +inf after it along its row, and along its column;
// infinities without NaN; a row of +inf, a column of -inf (MIN of only +inf
// is +inf, not the largest finite value); matrices of +inf, -inf and NaN.
std::vector<SpecialCase> SpecialCases(int64_t m, int64_t n) {
  std::vector<SpecialCase> cases;
  const int64_t rm = m / 2, cm = n / 2;
  cases.push_back({"NaN first", {{0, 0, kNaN}}});
  cases.push_back({"NaN middle", {{rm, cm, kNaN}}});
  cases.push_back({"NaN last", {{m - 1, n - 1, kNaN}}});
  {
    SpecialCase row{"NaN between -inf and +inf in its row", {{rm, cm, kNaN}}};
    if (cm > 0) row.specials.push_back({rm, cm - 1, -kInf});
    if (cm + 1 < n) row.specials.push_back({rm, cm + 1, kInf});
    cases.push_back(row);
    SpecialCase col{"NaN between +inf and -inf in its column", {{rm, cm, kNaN}}};
    if (rm > 0) col.specials.push_back({rm - 1, cm, kInf});
    if (rm + 1 < m) col.specials.push_back({rm + 1, cm, -kInf});
    cases.push_back(col);
  }
  cases.push_back({"+inf first, -inf last, no NaN", {{0, 0, kInf}, {m - 1, n - 1, -kInf}}});
  SpecialCase inf_row{"row of +inf", {}}, inf_col{"column of -inf", {}};
  for (int64_t c = 0; c < n; ++c) inf_row.specials.push_back({rm, c, kInf});
  for (int64_t r = 0; r < m; ++r) inf_col.specials.push_back({r, cm, -kInf});
  cases.push_back(inf_row);
  cases.push_back(inf_col);
  cases.push_back({"all +inf", {}, true, kInf});
  cases.push_back({"all -inf", {}, true, -kInf});
  cases.push_back({"all NaN", {}, true, kNaN});
  return cases;
}

// Runs `v` on random values with the case's values written in and checks the
// result element by element: MIN and MAX exactly (NaN where the range holds
// one), SUM and MEAN by the contract, and the library's reference and
// CheckAgainstReference agree. The output is poisoned with a finite value,
// not NaN, so an element never written cannot pass for an expected NaN.
template <typename T>
void CheckSpecial(const Variant& v, const Problem& p, const SpecialCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> a = RandomValues<T>(InputAElements(p), rng);
  if (c.fill) std::fill(a.begin(), a.end(), static_cast<T>(c.fill_value));
  for (const Special& s : c.specials) a[s.r * p.n + s.c] = static_cast<T>(s.v);
  std::vector<T> out(OutputElements(p), T(12345));
  ASSERT_TRUE(v.launch(p, Buffers{a.data(), nullptr, out.data(), nullptr, 0}, {}).ok());
  const std::vector<double> a64(a.begin(), a.end());
  const std::vector<double> expected = Expected(p, a64, {});
  const std::vector<double> reference = ReferenceResult(p, a.data(), nullptr);
  ASSERT_EQ(reference.size(), expected.size());
  const bool exact = p.reduce_op == ReduceOp::kMin || p.reduce_op == ReduceOp::kMax;
  double sum_abs = 0;
  for (double x : a64) sum_abs += std::isfinite(x) ? std::fabs(x) : 0;
  const double tol = (p.dtype == DType::kFloat32 ? 1e-5 : 1e-12) * std::max(1.0, sum_abs);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(Matches(reference[i], expected[i], exact ? 0 : 1e-12 * std::max(1.0, sum_abs)))
        << "reference element " << i << ": " << reference[i] << ", expected " << expected[i];
    EXPECT_TRUE(Matches(double(out[i]), expected[i], exact ? 0 : tol))
        << "element " << i << ": got " << out[i] << ", expected " << expected[i];
  }
  const CheckResult check =
      CheckAgainstReference(p, v.reduced_precision, a.data(), out.data(), expected);
  EXPECT_TRUE(check.ok) << check.message;
}

constexpr ReduceOp kEveryReduceOp[] = {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kSum,
                                       ReduceOp::kMean};
constexpr ReduceAxis kEveryAxis[] = {ReduceAxis::kAll, ReduceAxis::kPerRow, ReduceAxis::kPerColumn};

void CheckSpecialEverywhere(const Shape& s, const SpecialCase& c,
                            std::span<const ReduceOp> ops = kEveryReduceOp) {
  for (const Variant* v : DefaultRegistry().List(Op::kReduce, Backend::kCpu)) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (ReduceOp rop : ops) {
        for (ReduceAxis axis : kEveryAxis) {
          Problem p{Op::kReduce, dtype, s.m, s.n, 1, rop, axis};
          const uint64_t seed = FreshSeed();
          SCOPED_TRACE(v->name + " " + Describe(p, seed) + ": " + c.name);
          if (dtype == DType::kFloat32)
            CheckSpecial<float>(*v, p, c, seed);
          else
            CheckSpecial<double>(*v, p, c, seed);
        }
      }
    }
  }
}

TEST(CpuKernels, ReduceNaNAndInfinityCases) {
  // kShapes, widths around the eight accumulators of a row, and short rows.
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  for (Shape s : {Shape{1, 8, 1}, Shape{1, 9, 1}, Shape{2, 7, 1}, Shape{3, 16, 1}, Shape{4, 17, 1},
                  Shape{2, 2, 1}})
    shapes.push_back(s);
  for (const Shape& s : shapes) {
    for (const SpecialCase& c : SpecialCases(s.m, s.n)) CheckSpecialEverywhere(s, c);
  }
}

// One NaN at every position of small matrices in turn: first, middle and
// last of every row and column, with exactly one row and one column holding
// it (the other rows' and columns' results must stay finite).
TEST(CpuKernels, ReduceNaNAtEveryPosition) {
  for (const Shape& s : {Shape{5, 19, 1}, Shape{19, 5, 1}, Shape{1, 23, 1}, Shape{23, 1, 1}}) {
    for (int64_t r = 0; r < s.m; ++r) {
      for (int64_t c = 0; c < s.n; ++c) {
        CheckSpecialEverywhere(
            s, {"NaN at [" + std::to_string(r) + "," + std::to_string(c) + "]", {{r, c, kNaN}}},
            std::span<const ReduceOp>(kEveryReduceOp, 2));
      }
    }
  }
}

// Large enough that rows, bands and columns are split over threads: the NaN
// must survive the combination of the threads' partials.
TEST(CpuKernels, ReduceNaNAcrossThreads) {
  const Shape s{1024, 600, 1};
  for (const SpecialCase& c :
       {SpecialCase{"NaN first", {{0, 0, kNaN}}}, SpecialCase{"NaN middle", {{512, 300, kNaN}}},
        SpecialCase{"NaN last, -inf before it", {{1023, 598, -kInf}, {1023, 599, kNaN}}}}) {
    CheckSpecialEverywhere(s, c, std::span<const ReduceOp>(kEveryReduceOp, 2));
  }
}

// A small case of that rule: [[nan, 1], [2, inf]].
TEST(CpuKernels, ReduceNaNExampleMatchesNumPy) {
  const Variant* v = DefaultRegistry().Find(Op::kReduce, Backend::kCpu, "cpu_reference");
  ASSERT_NE(v, nullptr);
  struct Want {
    ReduceOp op;
    ReduceAxis axis;
    std::vector<double> out;
  };
  // np.min(x) / np.min(x, axis=1) / np.min(x, axis=0), and the same for max.
  const Want wants[] = {
      {ReduceOp::kMin, ReduceAxis::kAll, {kNaN}},
      {ReduceOp::kMin, ReduceAxis::kPerRow, {kNaN, 2}},
      {ReduceOp::kMin, ReduceAxis::kPerColumn, {kNaN, 1}},
      {ReduceOp::kMax, ReduceAxis::kAll, {kNaN}},
      {ReduceOp::kMax, ReduceAxis::kPerRow, {kNaN, kInf}},
      {ReduceOp::kMax, ReduceAxis::kPerColumn, {kNaN, kInf}},
      {ReduceOp::kSum, ReduceAxis::kPerRow, {kNaN, kInf}},
      {ReduceOp::kMean, ReduceAxis::kPerColumn, {kNaN, kInf}},
  };
  for (const Want& w : wants) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      Problem p{Op::kReduce, dtype, 2, 2, 1, w.op, w.axis};
      SCOPED_TRACE(Describe(p, 0));
      std::vector<double> got(w.out.size());
      if (dtype == DType::kFloat32) {
        const float a[] = {NAN, 1, 2, INFINITY};
        std::vector<float> out(w.out.size(), 12345.f);
        ASSERT_TRUE(v->launch(p, Buffers{a, nullptr, out.data(), nullptr, 0}, {}).ok());
        got.assign(out.begin(), out.end());
      } else {
        const double a[] = {NAN, 1, 2, INFINITY};
        std::vector<double> out(w.out.size(), 12345.0);
        ASSERT_TRUE(v->launch(p, Buffers{a, nullptr, out.data(), nullptr, 0}, {}).ok());
        got = out;
      }
      for (size_t i = 0; i < w.out.size(); ++i) {
        EXPECT_TRUE(Matches(got[i], w.out[i], 0))
            << "element " << i << ": got " << got[i] << ", want " << w.out[i];
      }
    }
  }
}

// ---- Payloads at any byte offset: the server hands the CPU variants
// pointers into gRPC slices, e.g. 10 bytes into one. Each variant must give
// the same bits as on aligned buffers, reading and writing at +1, +2 and +10
// (run under the asan preset, UBSan reports any misaligned float or double
// load or store).

// `bytes` (when not null) copied to `offset` bytes past a 16-byte boundary
// of `storage`; the rest of `storage` holds 0xAB.
void* PlaceAt(std::vector<unsigned char>& storage, const void* bytes, size_t size, size_t offset) {
  storage.assign(size + offset + 16, 0xAB);
  unsigned char* base = storage.data();
  base += (16 - reinterpret_cast<uintptr_t>(base) % 16) % 16;
  if (bytes != nullptr && size > 0) std::memcpy(base + offset, bytes, size);
  return base + offset;
}

template <typename T>
void CheckAtOffsets(const Variant& v, const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<T> a = RandomValues<T>(InputAElements(p), rng);
  const std::vector<T> b = RandomValues<T>(InputBElements(p), rng);
  std::vector<T> aligned_out(OutputElements(p));
  ASSERT_TRUE(
      v.launch(p, Buffers{a.data(), b.empty() ? nullptr : b.data(), aligned_out.data(), nullptr, 0},
               {})
          .ok());
  const std::vector<double> aligned_ref = ReferenceResult(p, a.data(), b.data());
  const size_t out_bytes = aligned_out.size() * sizeof(T);
  for (size_t offset : {1, 2, 10}) {
    SCOPED_TRACE("offset +" + std::to_string(offset));
    std::vector<unsigned char> sa, sb, sout;
    const void* pa = PlaceAt(sa, a.data(), a.size() * sizeof(T), offset);
    const void* pb = b.empty() ? nullptr : PlaceAt(sb, b.data(), b.size() * sizeof(T), offset);
    void* pout = PlaceAt(sout, nullptr, out_bytes, offset);
    ASSERT_TRUE(v.launch(p, Buffers{pa, pb, pout, nullptr, 0}, {}).ok());
    EXPECT_EQ(std::memcmp(pout, aligned_out.data(), out_bytes), 0)
        << "different bits than on aligned buffers";
    EXPECT_EQ(static_cast<unsigned char*>(pout)[out_bytes], 0xAB) << "wrote past the output";
    // The reference and the check read at any offset too.
    const std::vector<double> ref = ReferenceResult(p, pa, pb);
    EXPECT_EQ(ref, aligned_ref);
    const CheckResult check = CheckAgainstReference(p, v.reduced_precision, pa, pout, ref);
    EXPECT_TRUE(check.ok) << check.message;
  }
}

TEST(CpuKernels, EveryVariantReadsAndWritesAtAnyByteOffset) {
  for (Op op : {Op::kMatMul, Op::kTranspose, Op::kReduce}) {
    for (const Variant* v : DefaultRegistry().List(op, Backend::kCpu)) {
      for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
        for (const Shape& s : {Shape{33, 17, 9}, Shape{1, 37, 5}, Shape{64, 64, 64}}) {
          for (ReduceOp rop : kEveryReduceOp) {
            for (ReduceAxis axis : kEveryAxis) {
              if (op != Op::kReduce && (rop != ReduceOp::kSum || axis != ReduceAxis::kAll))
                continue;
              Problem p{op, dtype, s.m, s.n, s.k, rop, axis};
              const uint64_t seed = FreshSeed();
              SCOPED_TRACE(v->name + " " + Describe(p, seed));
              if (dtype == DType::kFloat32)
                CheckAtOffsets<float>(*v, p, seed);
              else
                CheckAtOffsets<double>(*v, p, seed);
            }
          }
        }
      }
    }
  }
}

TEST(Check, NaNMatchesOnlyNaNAndInfinityOnlyItself) {
  Problem p{Op::kReduce, DType::kFloat64, 1, 3, 1, ReduceOp::kMax, ReduceAxis::kPerColumn};
  const double a[] = {kNaN, kInf, 0.5};
  const std::vector<double> ref = {kNaN, kInf, 0.5};
  double out[] = {kNaN, kInf, 0.5};
  EXPECT_TRUE(CheckAgainstReference(p, false, a, out, ref).ok);
  out[0] = 1;  // a number where NaN is expected
  EXPECT_FALSE(CheckAgainstReference(p, false, a, out, ref).ok);
  out[0] = kNaN;
  out[1] = std::numeric_limits<double>::max();  // finite where +inf is expected
  EXPECT_FALSE(CheckAgainstReference(p, false, a, out, ref).ok);
  out[1] = -kInf;
  EXPECT_FALSE(CheckAgainstReference(p, false, a, out, ref).ok);
  out[1] = kInf;
  out[2] = kNaN;  // NaN where a number is expected
  EXPECT_FALSE(CheckAgainstReference(p, false, a, out, ref).ok);
  // An infinity in a reduced range does not make the scale infinite: a wrong
  // finite MIN next to it still fails.
  Problem q{Op::kReduce, DType::kFloat64, 1, 2, 1, ReduceOp::kMin, ReduceAxis::kAll};
  const double b[] = {kInf, 0.25};
  double wrong = 0.5;
  EXPECT_FALSE(CheckAgainstReference(q, false, b, &wrong, {0.25}).ok);
}

TEST(Check, CatchesAWrongElementAndNaN) {
  Problem p{Op::kTranspose, DType::kFloat32, 2, 3, 1};
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<float> out = {1, 4, 2, 5, 3, 6};
  std::vector<double> ref(out.begin(), out.end());
  EXPECT_TRUE(CheckAgainstReference(p, false, a.data(), out.data(), ref).ok);
  out[3] = 5.0001f;
  const CheckResult wrong = CheckAgainstReference(p, false, a.data(), out.data(), ref);
  EXPECT_FALSE(wrong.ok);
  EXPECT_NE(wrong.message.find("[1,1]"), std::string::npos) << wrong.message;
  out[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CheckAgainstReference(p, false, a.data(), out.data(), ref).ok);
}

TEST(Check, MatMulToleranceScalesWithTheResult) {
  Problem p{Op::kMatMul, DType::kFloat32, 1, 1, 1};
  float a = 1, out = 1000.05f;
  EXPECT_TRUE(CheckAgainstReference(p, false, &a, &out, {1000.0}).ok);  // 5e-5 relative
  out = 1000.5f;
  EXPECT_FALSE(CheckAgainstReference(p, false, &a, &out, {1000.0}).ok);  // 5e-4 relative
}

TEST(Registry, RejectsDuplicatesAndListsInOrder) {
  Registry r;
  Variant v;
  v.name = "x";
  v.dtypes = {DType::kFloat32};
  v.launch = [](const Problem&, const Buffers&, const LaunchContext&) { return absl::OkStatus(); };
  EXPECT_TRUE(r.Add(v).ok());
  EXPECT_FALSE(r.Add(v).ok());
  v.name = "y";
  EXPECT_TRUE(r.Add(v).ok());
  auto list = r.List(Op::kMatMul, Backend::kCpu);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "x");
  EXPECT_EQ(r.Find(Op::kMatMul, Backend::kCuda, "x"), nullptr);
}

TEST(Registry, RejectsVariantsWithoutLauncherNameOrElementType) {
  Registry r;
  Variant v;
  v.name = "x";
  v.dtypes = {DType::kFloat32};
  const absl::Status no_launcher = r.Add(v);
  EXPECT_EQ(no_launcher.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_launcher.message().find("matmul/x has no launcher"), std::string::npos)
      << no_launcher;
  v.launch = [](const Problem&, const Buffers&, const LaunchContext&) { return absl::OkStatus(); };
  v.dtypes.clear();
  EXPECT_FALSE(r.Add(v).ok());
  v.dtypes = {DType::kFloat32};
  v.name.clear();
  EXPECT_FALSE(r.Add(v).ok());
  EXPECT_TRUE(r.List(Backend::kCpu).empty());
}

absl::Status Succeed(const Problem&, const Buffers&) { return absl::OkStatus(); }

TEST(Ladder, BrokenTablesAreErrors) {
  constexpr LadderRow<CpuLaunch> kDuplicate[] = {
      {.name = "a", .description = "first", .dtypes = kFloat32Only, .launch = Succeed},
      {.name = "a", .description = "again", .dtypes = kFloat32Only, .launch = Succeed},
  };
  Registry dup;
  const absl::Status twice = AddCpuLadder(dup, Op::kMatMul, kDuplicate);
  EXPECT_EQ(twice.code(), absl::StatusCode::kAlreadyExists) << twice;
  EXPECT_NE(twice.message().find("matmul/a"), std::string::npos) << twice;

  constexpr LadderRow<CpuLaunch> kNoLauncher[] = {
      {.name = "b", .description = "no launcher", .dtypes = kFloat32AndFloat64},
  };
  Registry none;
  const absl::Status missing = AddCpuLadder(none, Op::kReduce, kNoLauncher);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument) << missing;
  EXPECT_NE(missing.message().find("reduce/b has no launcher"), std::string::npos) << missing;
}

TEST(Ladder, RowsBecomeCheckedVariantsInOrder) {
  constexpr LadderRow<CpuLaunch> kRows[] = {
      {.name = "simple", .description = "d1", .dtypes = kFloat32AndFloat64, .launch = Succeed},
      {.name = "fast",
       .description = "d2",
       .dtypes = kFloat32Only,
       .reduced_precision = true,
       .fallback_rank = 1,
       .workspace_bytes = [](const Problem& p) { return size_t(p.m) * 8; },
       .launch = Succeed},
  };
  Registry r;
  ASSERT_TRUE(AddCpuLadder(r, Op::kTranspose, kRows).ok());
  const auto list = r.List(Op::kTranspose, Backend::kCpu);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]->name, "simple");
  EXPECT_EQ(list[0]->dtypes, (std::vector<DType>{DType::kFloat32, DType::kFloat64}));
  EXPECT_EQ(list[0]->fallback_rank, 0);
  const Variant& fast = *list[1];
  EXPECT_EQ(fast.description, "d2");
  EXPECT_TRUE(fast.reduced_precision);
  EXPECT_EQ(fast.fallback_rank, 1);
  Problem p{Op::kTranspose, DType::kFloat32, 4, 3, 1};
  EXPECT_EQ(fast.WorkspaceBytes(p), 32u);
  std::vector<char> workspace(32);
  Buffers buf;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);  // no workspace
  buf.workspace = workspace.data();
  buf.workspace_bytes = workspace.size();
  EXPECT_TRUE(fast.launch(p, buf, {}).ok());
  p.dtype = DType::kFloat64;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);
  p.dtype = DType::kFloat32;
  p.op = Op::kMatMul;
  EXPECT_EQ(fast.launch(p, buf, {}).code(), absl::StatusCode::kInvalidArgument);
}

// The check a variant's launch and its batched form share: each refusal
// names the variant and what is wrong.
TEST(Ladder, ProblemCheckNamesWhatIsWrong) {
  Variant v;
  v.op = Op::kMatMul;
  v.name = "tiled";
  v.dtypes = {DType::kFloat32, DType::kFloat16};
  const ProblemCheck check(v);
  Problem p{Op::kMatMul, DType::kFloat32, 3, 5, 7};
  EXPECT_TRUE(check(p).ok());

  p.op = Op::kTranspose;
  absl::Status s = check(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tiled: a transpose problem for a matmul variant");

  p.op = Op::kMatMul;
  p.dtype = DType::kFloat64;
  s = check(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "tiled does not support float64");

  p.dtype = DType::kFloat32;
  p.float32_output = true;  // only 16-bit inputs have a wider output
  s = check(p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a float32 output is for MatMul and Reduce of 16-bit inputs, not "
                             "matmul of float32"),
            std::string::npos)
      << s;
  p.dtype = DType::kFloat16;
  EXPECT_TRUE(check(p).ok());

  // The check keeps its own copy: the variant may move or die after.
  v = Variant{};
  EXPECT_TRUE(check(p).ok());
}

TEST(Registry, DefaultRegistryLoadsEveryLadder) {
  const absl::StatusOr<const Registry*> loaded = LoadDefaultRegistry();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, &DefaultRegistry());
  for (Op op : {Op::kMatMul, Op::kTranspose, Op::kReduce}) {
    const auto cpu = (*loaded)->List(op, Backend::kCpu);
    ASSERT_EQ(cpu.size(), 1u) << OpName(op);
    EXPECT_EQ(cpu[0]->name, "cpu_reference");
    EXPECT_GT(cpu[0]->fallback_rank, 0);
    EXPECT_EQ((*loaded)->List(op, Backend::kCuda).empty(), !BuiltWithCuda()) << OpName(op);
  }
}

}  // namespace
}  // namespace gpucompute::kernels
