// Profile as an instrument, without a GPU: the lesson pairs name real CUDA
// ladder variants, comparisons appear only when both variants ran ok, and a
// roofline fraction above 1.05, or one taken against a ceiling that does not
// match the access pattern, carries a note. Synthetic measurements throughout.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "server/engine/lessons.h"
#include "server/engine/roofline.h"
#include "server/grpc/profile_response.h"

namespace gpucompute::server {
namespace {

using kernels::Op;

std::string ReadSource(const std::string& relative) {
  const std::string path = std::string(GPUCOMPUTE_SOURCE_DIR) + "/" + relative;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every `.name = "..."` of a ladder source.
std::set<std::string> LadderNames(Op op) {
  const char* dir = op == Op::kMatMul ? "matmul" : op == Op::kTranspose ? "transpose" : "reduce";
  const std::string source = ReadSource(std::string("kernels/cuda/") + dir + "/ladder.cc");
  std::set<std::string> names;
  for (size_t at = source.find(".name = \""); at != std::string::npos;
       at = source.find(".name = \"", at + 1)) {
    const size_t open = at + 9, close = source.find('"', open);
    names.insert(source.substr(open, close - open));
  }
  EXPECT_FALSE(names.empty()) << dir;
  return names;
}

TEST(LessonsTest, EveryPairNamesTwoVariantsOfItsLadder) {
  std::set<std::string> ideas;
  ASSERT_GE(Lessons().size(), 7u);
  for (const Lesson& lesson : Lessons()) {
    const std::set<std::string> names = LadderNames(lesson.op);
    EXPECT_TRUE(names.count(std::string(lesson.before))) << lesson.idea << ": " << lesson.before;
    EXPECT_TRUE(names.count(std::string(lesson.after))) << lesson.idea << ": " << lesson.after;
    EXPECT_NE(lesson.before, lesson.after) << lesson.idea;
    EXPECT_FALSE(lesson.lesson.empty()) << lesson.idea;
    EXPECT_EQ(lesson.lesson.find('\n'), std::string_view::npos) << lesson.idea;
    EXPECT_TRUE(ideas.insert(std::string(lesson.idea)).second) << "twice: " << lesson.idea;
    // Its counter is one a Profile reads, for every variant of the pair.
    const CounterSpec* counter = FindCounter(lesson.counter);
    ASSERT_NE(counter, nullptr) << lesson.idea << ": " << lesson.counter;
    EXPECT_FALSE(counter->tensor_cores_only) << lesson.idea;
  }
  for (const char* idea : {"coalescing", "bank conflicts", "swizzle vs padding", "tiling",
                           "register tiling", "divergence", "vector loads"}) {
    EXPECT_TRUE(ideas.count(idea)) << idea;
  }
}

TEST(LessonsTest, OnlyPairsWhoseVariantsBothRanOk) {
  const std::vector<TimedVariant> transpose = {
      {"naive", true, 100, {}},        {"shared", true, 50, {}},
      {"shared_padded", true, 40, {}}, {"shared_swizzled", false, 0, {}},      // failed
      {"cublas", true, 30, {}},        {"shared_padded_vec16", true, 20, {}},  // no _wide: no pair
  };
  const std::vector<MeasuredLesson> got = MeasureLessons(Op::kTranspose, transpose);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].lesson->idea, "coalescing");
  EXPECT_DOUBLE_EQ(got[0].time_ratio, 2.0);
  EXPECT_EQ(got[1].lesson->idea, "bank conflicts");
  EXPECT_DOUBLE_EQ(got[1].time_ratio, 1.25);

  // The same names under another op are not that op's lessons.
  EXPECT_TRUE(MeasureLessons(Op::kReduce, transpose).empty());
  const std::vector<MeasuredLesson> matmul = MeasureLessons(
      Op::kMatMul, std::vector<TimedVariant>{{"naive", true, 900, {}}, {"tiled32", true, 300, {}}});
  ASSERT_EQ(matmul.size(), 1u);
  EXPECT_EQ(matmul[0].lesson->idea, "tiling");
  EXPECT_DOUBLE_EQ(matmul[0].time_ratio, 3.0);
  // A variant ok but without a time (none timed) is no comparison.
  EXPECT_TRUE(MeasureLessons(Op::kMatMul, std::vector<TimedVariant>{{"naive", true, 900, {}},
                                                                    {"tiled32", true, 0, {}}})
                  .empty());
}

TEST(RooflineTest, AboveTheCeilingCarriesANote) {
  kernels::Problem p{.op = Op::kTranspose, .dtype = kernels::DType::kFloat32, .m = 1000, .n = 1000};
  const double bytes = kernels::MinimalBytes(p);  // 8e6
  Ceilings c;
  c.gbytes_per_s = 100;  // 8e6 bytes: 80 us at the ceiling
  EXPECT_DOUBLE_EQ(bytes / (c.gbytes_per_s * 1e3), 80);
  RooflineVerdict at = JudgeRoofline(p, c, 80);
  EXPECT_DOUBLE_EQ(at.fraction, 1.0);
  EXPECT_EQ(at.note, "");
  RooflineVerdict slightly = JudgeRoofline(p, c, 80 / 1.04);
  EXPECT_EQ(slightly.note, "");
  RooflineVerdict above = JudgeRoofline(p, c, 40);
  EXPECT_DOUBLE_EQ(above.fraction, 2.0);
  EXPECT_EQ(above.note, kAboveCeilingNote);
  // A device that knows its cache says when the problem fits in it.
  c.cache_bytes = int64_t{32} << 20;
  RooflineVerdict cached = JudgeRoofline(p, c, 40);
  EXPECT_EQ(cached.note, std::string(kAboveCeilingNote) + " (" + kFitsInCacheNote + ": 32 MiB)");
  c.cache_bytes = int64_t{4} << 20;  // 8e6 bytes do not fit
  EXPECT_EQ(JudgeRoofline(p, c, 40).note, kAboveCeilingNote);
}

TEST(RooflineTest, ReduceIsHeldToTheReadCeilingWhenThereIsOne) {
  kernels::Problem p{.op = Op::kReduce,
                     .dtype = kernels::DType::kFloat32,
                     .m = 1000,
                     .n = 1000,
                     .reduce_axis = kernels::ReduceAxis::kAll};
  Ceilings copy_only;
  copy_only.gbytes_per_s = 100;
  RooflineVerdict against_copy = JudgeRoofline(p, copy_only, 100);
  EXPECT_EQ(against_copy.note, kNoReadCeilingNote);
  Ceilings with_read = copy_only;
  with_read.gbytes_per_s_read = 200;
  RooflineVerdict against_read = JudgeRoofline(p, with_read, 100);
  EXPECT_EQ(against_read.note, "");
  EXPECT_NEAR(against_read.fraction, against_copy.fraction / 2, 1e-12);
  // Both notes when a reduce without a read ceiling is above the copy ceiling.
  RooflineVerdict both = JudgeRoofline(p, copy_only, 10);
  EXPECT_NE(both.note.find(kNoReadCeilingNote), std::string::npos);
  EXPECT_NE(both.note.find(kAboveCeilingNote), std::string::npos);
  // A transpose reads and writes: the read ceiling is not its ceiling.
  p.op = Op::kTranspose;
  EXPECT_DOUBLE_EQ(RooflineFraction(p, with_read, 50), RooflineFraction(p, copy_only, 50));
}

kernels::Variant FakeVariant(Op op, const std::string& name) {
  kernels::Variant v;
  v.op = op;
  v.name = name;
  v.description = "fake " + name;
  v.backend = kernels::Backend::kCuda;
  v.dtypes = {kernels::DType::kFloat32};
  return v;
}

VariantMeasurement Measured(const kernels::Variant& v, bool ok, std::vector<double> times) {
  VariantMeasurement m;
  m.variant = &v;
  m.ok = ok;
  if (!ok) m.error = "result differs from the reference";
  if (ok) m.times_us = std::move(times);
  return m;
}

TEST(ProfileResponseTest, ComparisonsNotesAndCounters) {
  const kernels::Variant naive = FakeVariant(Op::kTranspose, "naive");
  const kernels::Variant shared = FakeVariant(Op::kTranspose, "shared");
  const kernels::Variant padded = FakeVariant(Op::kTranspose, "shared_padded");
  const kernels::Variant swizzled = FakeVariant(Op::kTranspose, "shared_swizzled");
  const kernels::Variant wide = FakeVariant(Op::kTranspose, "shared_padded_wide");
  const kernels::Variant vec16 = FakeVariant(Op::kTranspose, "shared_padded_vec16");
  const std::vector<VariantMeasurement> measured = {
      Measured(naive, true, {90, 100, 110}),   Measured(shared, true, {50, 50}),
      Measured(padded, true, {40, 40, 40}),    Measured(swizzled, false, {}),
      Measured(wide, true, {36, 37, 30, 100}), Measured(vec16, true, {4}),
  };
  const kernels::Problem p{
      .op = Op::kTranspose, .dtype = kernels::DType::kFloat32, .m = 1000, .n = 1000};
  Ceilings ceilings;
  ceilings.gbytes_per_s = 1000;  // 8e6 bytes: 8 us at the ceiling
  DeviceDescription device;
  device.name = "cuda:0 fake";
  device.backend = kernels::Backend::kCuda;

  v1::ProfileResponse response;
  FillProfileResponse(p, measured, device, ceilings, "shared_padded_vec16", &response);
  ASSERT_EQ(response.variants_size(), 6);
  EXPECT_EQ(response.variants(0).variant(), "shared_padded_vec16");
  EXPECT_DOUBLE_EQ(response.variants(0).fraction_of_roofline(), 2.0);
  EXPECT_EQ(response.variants(0).note(), kAboveCeilingNote);
  for (int i = 1; i < response.variants_size(); ++i) {
    EXPECT_EQ(response.variants(i).note(), "") << response.variants(i).variant();
    EXPECT_EQ(response.variants(i).counters_size(), 0);
  }

  ASSERT_EQ(response.comparisons_size(), 3);
  const v1::Comparison& coalescing = response.comparisons(0);
  EXPECT_EQ(coalescing.idea(), "coalescing");
  EXPECT_EQ(coalescing.before(), "naive");
  EXPECT_EQ(coalescing.after(), "shared");
  EXPECT_DOUBLE_EQ(coalescing.time_ratio(), 2.0);  // medians 100 / 50
  EXPECT_FALSE(coalescing.lesson().empty());
  EXPECT_EQ(coalescing.counter(), "");  // no counters asked for
  EXPECT_EQ(coalescing.counter_before(), 0);
  EXPECT_FALSE(coalescing.counter_as_predicted());
  EXPECT_EQ(response.comparisons(1).idea(), "bank conflicts");
  EXPECT_DOUBLE_EQ(response.comparisons(1).time_ratio(), 1.25);
  // swizzle vs padding: shared_swizzled failed, so no comparison.
  EXPECT_EQ(response.comparisons(2).idea(), "vector loads");
  EXPECT_DOUBLE_EQ(response.comparisons(2).time_ratio(), 36.5 / 4);

  // Counters asked for and none came back: every row says why, on either
  // backend.
  v1::ProfileResponse with_counters;
  FillProfileResponse(p, measured, device, ceilings, "", &with_counters, true);
  for (const v1::VariantProfile& row : with_counters.variants()) {
    EXPECT_NE(row.note().find(row.ok() ? "hardware counters not read: the device returned none"
                                       : "hardware counters not read: this variant did not run ok"),
              std::string::npos)
        << row.variant();
    EXPECT_EQ(row.counters_size(), 0);
  }
  EXPECT_NE(with_counters.variants(0).note().find(kAboveCeilingNote), std::string::npos);
  device.backend = kernels::Backend::kCpu;
  v1::ProfileResponse on_cpu;
  FillProfileResponse(p, measured, device, ceilings, "", &on_cpu, true);
  EXPECT_NE(on_cpu.variants(1).note().find(
                "hardware counters need a CUDA device; this server runs the CPU backend"),
            std::string::npos);
}

}  // namespace
}  // namespace gpucompute::server
