// Profile as an instrument, without a GPU: the lessons the CUDA ladder rows
// declare name other variants of their ladder and counters a Profile reads,
// comparisons appear only when both variants ran ok, in teaching order, and
// a roofline fraction above 1.05, or one taken against a ceiling that does
// not match the access pattern, carries a note. Synthetic measurements
// throughout.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gpucompute/kernels/ladder.h"
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

// The string after each `field = "` in `text`, from `from` on, up to `to`.
std::vector<std::string> Quoted(const std::string& text, const std::string& field, size_t from = 0,
                                size_t to = std::string::npos) {
  std::vector<std::string> out;
  const std::string key = field + " = \"";
  for (size_t at = text.find(key, from); at != std::string::npos && at < to;
       at = text.find(key, at + 1)) {
    const size_t open = at + key.size(), close = text.find('"', open);
    out.push_back(text.substr(open, close - open));
  }
  return out;
}

struct SourceLesson {
  std::string after, before, idea, counter;
};

// Every row name of a CUDA ladder source, and the lessons its rows declare.
void ReadLadder(const char* dir, std::set<std::string>& names, std::vector<SourceLesson>& lessons) {
  const std::string source = ReadSource(std::string("kernels/cuda/") + dir + "/ladder.cc");
  for (const std::string& name : Quoted(source, ".name")) names.insert(name);
  EXPECT_FALSE(names.empty()) << dir;
  for (size_t row = source.find(".name = \""); row != std::string::npos;) {
    const size_t next = source.find(".name = \"", row + 1);
    const std::vector<std::string> before = Quoted(source, ".before", row, next);
    if (!before.empty()) {
      const std::vector<std::string> idea = Quoted(source, ".idea", row, next);
      const std::vector<std::string> counter = Quoted(source, ".counter", row, next);
      EXPECT_EQ(idea.size(), 1u) << dir << ": " << before[0];
      EXPECT_EQ(counter.size(), 1u) << dir << ": " << before[0];
      if (idea.size() == 1 && counter.size() == 1) {
        lessons.push_back(
            {Quoted(source, ".name", row, row + 1)[0], before[0], idea[0], counter[0]});
      }
    }
    row = next;
  }
}

TEST(LessonsTest, EveryLessonNamesAnotherVariantOfItsLadderAndACounterProfileReads) {
  std::set<std::string> ideas;
  for (const char* dir : {"matmul", "transpose", "reduce"}) {
    std::set<std::string> names;
    std::vector<SourceLesson> lessons;
    ReadLadder(dir, names, lessons);
    for (const SourceLesson& lesson : lessons) {
      EXPECT_TRUE(names.count(lesson.before)) << lesson.idea << ": " << lesson.before;
      EXPECT_NE(lesson.before, lesson.after) << lesson.idea;
      EXPECT_TRUE(ideas.insert(lesson.idea).second) << "twice: " << lesson.idea;
      // Its counter is one a Profile reads, for every variant of the pair.
      const CounterSpec* counter = FindCounter(lesson.counter);
      ASSERT_NE(counter, nullptr) << lesson.idea << ": " << lesson.counter;
      // A counter read only for tensor-core variants, for the lessons whose
      // two variants both use tensor cores.
      EXPECT_TRUE(!counter->tensor_cores_only || lesson.idea == "tensor cores" ||
                  lesson.idea == "XOR swizzle" || lesson.idea == "warpgroup MMA + TMA")
          << lesson.idea;
    }
  }
  for (const char* idea : {"coalescing", "bank conflicts", "swizzle vs padding", "tiling",
                           "register tiling", "divergence", "vector loads", "tensor cores"}) {
    EXPECT_TRUE(ideas.count(idea)) << idea;
  }
}

// The registered ladders carry the same lessons, each with a one-line text.
TEST(LessonsTest, TheRegistryCarriesTheLessons) {
  if (!kernels::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA";
  int lessons = 0;
  for (const kernels::Variant* v : kernels::DefaultRegistry().List(kernels::Backend::kCuda)) {
    if (!v->HasLesson()) continue;
    ++lessons;
    EXPECT_FALSE(v->lesson.text.empty()) << v->name;
    EXPECT_EQ(v->lesson.text.find('\n'), std::string_view::npos) << v->name;
  }
  // wgmma's lesson is listed where its row is (compute capability 9.0).
  const bool wgmma =
      kernels::DefaultRegistry().Find(Op::kMatMul, kernels::Backend::kCuda, "wgmma") != nullptr;
  EXPECT_EQ(lessons, wgmma ? 11 : 10);
}

// A ladder whose lesson names no other row of it is refused at registration.
TEST(LessonsTest, ALessonNamingNoOtherRowIsRefused) {
  using Row = kernels::LadderRow<kernels::CpuLaunch>;
  auto launch = [](const kernels::Problem&, const kernels::Buffers&) { return absl::OkStatus(); };
  kernels::CpuLaunch* run = +launch;
  const kernels::Lesson lesson{.before = "first", .idea = "i", .text = "t", .counter = "c"};
  const Row good[] = {
      {.name = "first", .dtypes = kernels::kFloat32Only, .launch = run},
      {.name = "second", .dtypes = kernels::kFloat32Only, .lesson = lesson, .launch = run}};
  kernels::Registry registry;
  EXPECT_TRUE(kernels::AddCpuLadder(registry, Op::kMatMul, good).ok());
  const Row bad[] = {{.name = "first", .dtypes = kernels::kFloat32Only, .launch = run},
                     {.name = "third",
                      .dtypes = kernels::kFloat32Only,
                      .lesson = {.before = "third", .idea = "i", .text = "t", .counter = "c"},
                      .launch = run}};
  kernels::Registry other;
  const absl::Status refused = kernels::AddCpuLadder(other, Op::kMatMul, bad);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("third"), std::string::npos) << refused;
}

kernels::Variant FakeVariant(Op op, const std::string& name, int rung = 0) {
  kernels::Variant v;
  v.op = op;
  v.name = name;
  v.description = "fake " + name;
  v.backend = kernels::Backend::kCuda;
  v.dtypes = {kernels::DType::kFloat32};
  v.rung = rung;
  return v;
}

// A fake of the variant with the idea, the text its own.
kernels::Variant Teaching(Op op, const std::string& name, int rung, std::string_view before,
                          std::string_view idea) {
  kernels::Variant v = FakeVariant(op, name, rung);
  v.lesson = {.before = before, .idea = idea, .text = idea, .counter = "smsp__inst_executed.sum"};
  return v;
}

// The CUDA Transpose ladder's first rungs and lessons.
struct TransposeFakes {
  kernels::Variant naive = FakeVariant(Op::kTranspose, "naive", 0);
  kernels::Variant shared = Teaching(Op::kTranspose, "shared", 1, "naive", "coalescing");
  kernels::Variant padded =
      Teaching(Op::kTranspose, "shared_padded", 2, "shared", "bank conflicts");
  kernels::Variant swizzled =
      Teaching(Op::kTranspose, "shared_swizzled", 3, "shared_padded", "swizzle vs padding");
  kernels::Variant cublas = FakeVariant(Op::kTranspose, "cublas", 4);
  kernels::Variant vec16 =
      Teaching(Op::kTranspose, "shared_padded_vec16", 5, "shared_padded_wide", "vector loads");
  kernels::Variant wide = FakeVariant(Op::kTranspose, "shared_padded_wide", 6);
};

TEST(LessonsTest, OnlyPairsWhoseVariantsBothRanOk) {
  const TransposeFakes t;
  const std::vector<TimedVariant> transpose = {
      {&t.naive, true, 100, {}}, {&t.shared, true, 50, {}},
      {&t.padded, true, 40, {}}, {&t.swizzled, false, 0, {}},  // failed
      {&t.cublas, true, 30, {}}, {&t.vec16, true, 20, {}},     // no _wide: no pair
  };
  const std::vector<MeasuredLesson> got = MeasureLessons(transpose);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].after->lesson.idea, "coalescing");
  EXPECT_DOUBLE_EQ(got[0].time_ratio, 2.0);
  EXPECT_EQ(got[1].after->lesson.idea, "bank conflicts");
  EXPECT_DOUBLE_EQ(got[1].time_ratio, 1.25);

  // Measured in another order, reported in teaching order.
  const std::vector<TimedVariant> reversed(transpose.rbegin(), transpose.rend());
  const std::vector<MeasuredLesson> again = MeasureLessons(reversed);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].after->lesson.idea, "coalescing");
  EXPECT_EQ(again[1].after->lesson.idea, "bank conflicts");

  // A variant of another op by the same name is not the one before.
  const kernels::Variant reduce_naive = FakeVariant(Op::kReduce, "naive");
  EXPECT_TRUE(MeasureLessons(std::vector<TimedVariant>{{&reduce_naive, true, 100, {}},
                                                       {&t.shared, true, 50, {}}})
                  .empty());
  const kernels::Variant naive = FakeVariant(Op::kMatMul, "naive", 0);
  const kernels::Variant tiled32 = Teaching(Op::kMatMul, "tiled32", 2, "naive", "tiling");
  const std::vector<MeasuredLesson> matmul =
      MeasureLessons(std::vector<TimedVariant>{{&naive, true, 900, {}}, {&tiled32, true, 300, {}}});
  ASSERT_EQ(matmul.size(), 1u);
  EXPECT_EQ(matmul[0].after->lesson.idea, "tiling");
  EXPECT_DOUBLE_EQ(matmul[0].time_ratio, 3.0);
  // A variant ok but without a time (none timed) is no comparison.
  EXPECT_TRUE(
      MeasureLessons(std::vector<TimedVariant>{{&naive, true, 900, {}}, {&tiled32, true, 0, {}}})
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

VariantMeasurement Measured(const kernels::Variant& v, bool ok, std::vector<double> times) {
  VariantMeasurement m;
  m.variant = &v;
  m.ok = ok;
  if (!ok) m.error = "result differs from the reference";
  if (ok) m.times_us = std::move(times);
  return m;
}

TEST(ProfileResponseTest, ComparisonsNotesAndCounters) {
  const TransposeFakes t;
  const std::vector<VariantMeasurement> measured = {
      Measured(t.naive, true, {90, 100, 110}),   Measured(t.shared, true, {50, 50}),
      Measured(t.padded, true, {40, 40, 40}),    Measured(t.swizzled, false, {}),
      Measured(t.wide, true, {36, 37, 30, 100}), Measured(t.vec16, true, {4}),
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
