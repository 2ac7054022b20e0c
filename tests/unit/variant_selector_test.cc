// "auto" selection: calibration is claimed once per bucket, measurements pick
// the fastest correct variant (reduced precision only when allowed), and the
// choices survive a restart through the cache file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>

#include "server/engine/variant_selector.h"

namespace gpucompute::server {
namespace {

kernels::Variant Fake(const std::string& name, bool reduced) {
  kernels::Variant v;
  v.name = name;
  v.backend = kernels::Backend::kCuda;
  v.dtypes = {kernels::DType::kFloat32};
  v.reduced_precision = reduced;
  v.launch = [](auto&, auto&, auto&) { return absl::OkStatus(); };
  return v;
}

class SelectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto [name, reduced] : {std::pair{"slow", false}, {"fast", false}, {"tf32", true}}) {
      ASSERT_TRUE(registry_.Add(Fake(name, reduced)).ok());
    }
    problem_.m = problem_.n = problem_.k = 1000;
  }
  std::vector<VariantMeasurement> Measured(double slow, double fast, double tf32,
                                           bool fast_ok = true) {
    std::vector<VariantMeasurement> out;
    for (auto [name, t, ok] :
         {std::tuple{"slow", slow, true}, {"fast", fast, fast_ok}, {"tf32", tf32, true}}) {
      VariantMeasurement m;
      m.variant = registry_.Find(kernels::Op::kMatMul, kernels::Backend::kCuda, name);
      m.ok = ok;
      if (ok) m.times_us = {t, t, t};
      out.push_back(m);
    }
    return out;
  }
  kernels::Registry registry_;
  kernels::Problem problem_;
};

TEST_F(SelectTest, CalibrationIsClaimedOncePerBucket) {
  VariantSelector selector(registry_, kernels::Backend::kCuda);
  auto first = selector.Choose(problem_, false);
  EXPECT_TRUE(first.calibrate);
  EXPECT_EQ(first.candidates.size(), 3u);
  EXPECT_FALSE(selector.Choose(problem_, false).calibrate);
  selector.AbandonCalibration(problem_);
  EXPECT_TRUE(selector.Choose(problem_, false).calibrate);
}

// A thread asking the same again is answered from its last answer, which
// stands only until a choice is made, loaded or given up anywhere, and is
// never another selector's.
TEST_F(SelectTest, ALastAnswerStandsOnlyUntilAChoiceChanges) {
  const std::string path =
      ::testing::TempDir() + "/autotune_last_" + std::to_string(getpid()) + ".tsv";
  std::remove(path.c_str());
  VariantSelector selector(registry_, kernels::Backend::kCuda);
  EXPECT_TRUE(selector.Choose(problem_, false).calibrate);
  // Asked again while the claim is held: the ladder's first, twice.
  const auto meanwhile = selector.Choose(problem_, false);
  EXPECT_FALSE(meanwhile.calibrate);
  EXPECT_EQ(meanwhile.variant->name, "slow");
  EXPECT_EQ(selector.Choose(problem_, false).variant, meanwhile.variant);
  selector.Record(problem_, Measured(90, 50, 10));
  EXPECT_EQ(selector.Choose(problem_, false).variant->name, "fast");
  EXPECT_EQ(selector.Choose(problem_, true).variant->name, "tf32");
  EXPECT_EQ(selector.Choose(problem_, false).variant->name, "fast");
  // Recorded on another thread: seen by this one's next call.
  std::thread([&] { selector.Record(problem_, Measured(10, 50, 5)); }).join();
  EXPECT_EQ(selector.Choose(problem_, false).variant->name, "slow");
  // Loaded from a file that another selector wrote: the same.
  {
    VariantSelector writer(registry_, kernels::Backend::kCuda);
    ASSERT_TRUE(writer.UseCacheFile(path).ok());
    writer.Record(problem_, Measured(90, 50, 10));
    // Another selector on this thread never answers from the first one's.
    EXPECT_EQ(writer.Choose(problem_, false).variant->name, "fast");
  }
  ASSERT_TRUE(selector.UseCacheFile(path).ok());
  EXPECT_EQ(selector.Choose(problem_, false).variant->name, "fast");
  VariantSelector fresh(registry_, kernels::Backend::kCuda);
  EXPECT_TRUE(fresh.Choose(problem_, false).calibrate);
  // Any field of the problem makes it another question.
  kernels::Problem other_bucket = problem_;
  other_bucket.k = 3000;
  EXPECT_TRUE(selector.Choose(other_bucket, false).calibrate);
  std::remove(path.c_str());
}

TEST_F(SelectTest, FastestCorrectExactVariantUnlessReducedAllowed) {
  VariantSelector selector(registry_, kernels::Backend::kCuda);
  selector.Record(problem_, Measured(90, 50, 10));
  EXPECT_EQ(selector.Select(problem_, false)->name, "fast");
  EXPECT_EQ(selector.Select(problem_, true)->name, "tf32");
  // Same bucket (next power of two), other shape.
  kernels::Problem near = problem_;
  near.m = 999;
  EXPECT_EQ(selector.Select(near, false)->name, "fast");
  // A wrong result is never chosen, however fast.
  selector.Record(problem_, Measured(90, 1, 10, /*fast_ok=*/false));
  EXPECT_EQ(selector.Select(problem_, false)->name, "slow");
  EXPECT_FALSE(selector.Choose(problem_, false).calibrate);
}

TEST_F(SelectTest, CalibrationShapeIsCappedButKeepsTheRest) {
  kernels::Problem big = problem_;
  big.op = kernels::Op::kReduce;
  big.m = 16384;
  big.n = 300;
  big.reduce_axis = kernels::ReduceAxis::kPerColumn;
  const kernels::Problem c = VariantSelector::CalibrationProblem(big);
  EXPECT_EQ(c.m, VariantSelector::kCalibrationMaxDim);
  EXPECT_EQ(c.n, 300);
  EXPECT_EQ(c.reduce_axis, kernels::ReduceAxis::kPerColumn);
  EXPECT_EQ(c.op, kernels::Op::kReduce);
}

TEST_F(SelectTest, CacheFileRoundTrip) {
  const std::string path = ::testing::TempDir() + "/autotune_" + std::to_string(getpid()) + ".tsv";
  std::remove(path.c_str());
  {
    VariantSelector selector(registry_, kernels::Backend::kCuda);
    ASSERT_TRUE(selector.UseCacheFile(path).ok());
    selector.Record(problem_, Measured(10, 50, 5));
  }
  VariantSelector restarted(registry_, kernels::Backend::kCuda);
  ASSERT_TRUE(restarted.UseCacheFile(path).ok());
  EXPECT_EQ(restarted.Select(problem_, false)->name, "slow");
  EXPECT_EQ(restarted.Select(problem_, true)->name, "tf32");
  EXPECT_FALSE(restarted.Choose(problem_, false).calibrate);
  std::remove(path.c_str());
}

// Requests served from host memory keep their own claims and choices: a
// Profile or a tensor request's calibration (kernels alone, on device
// memory) never overrides what was timed as served, and the reverse; both
// survive a restart, and a device-memory choice keeps the key it had.
TEST_F(SelectTest, ChoicesServedFromHostAreKeptApartFromDeviceMemoryOnes) {
  const std::string path =
      ::testing::TempDir() + "/autotune_placed_" + std::to_string(getpid()) + ".tsv";
  std::remove(path.c_str());
  constexpr ServedFrom kHost = ServedFrom::kHostMemory;
  {
    VariantSelector selector(registry_, kernels::Backend::kCuda);
    ASSERT_TRUE(selector.UseCacheFile(path).ok());
    EXPECT_TRUE(selector.Choose(problem_, false, kHost).calibrate);
    EXPECT_FALSE(selector.Choose(problem_, false, kHost).calibrate);
    EXPECT_TRUE(selector.Choose(problem_, false).calibrate);  // device memory's own claim

    auto as_served = Measured(/*slow=*/90, /*fast=*/10, /*tf32=*/40);
    for (VariantMeasurement& m : as_served) m.timed_as_served = true;
    selector.Record(problem_, as_served, kHost);
    EXPECT_EQ(selector.Select(problem_, false, kHost)->name, "fast");
    EXPECT_EQ(selector.Select(problem_, false)->name, "slow");  // still the ladder's first
    // The device-memory claim above still holds: the host's record released only its own.
    EXPECT_FALSE(selector.Choose(problem_, true).calibrate);

    // A Profile, or a tensor request's calibration.
    selector.Record(problem_, Measured(/*slow=*/20, /*fast=*/50, /*tf32=*/5));
    EXPECT_EQ(selector.Select(problem_, false)->name, "slow");
    EXPECT_EQ(selector.Select(problem_, true)->name, "tf32");
    EXPECT_EQ(selector.Select(problem_, false, kHost)->name, "fast");
    EXPECT_EQ(selector.Choose(problem_, false, kHost).variant->name, "fast");
    EXPECT_EQ(selector.Select(problem_, true, kHost)->name, "fast");
  }
  VariantSelector restarted(registry_, kernels::Backend::kCuda);
  ASSERT_TRUE(restarted.UseCacheFile(path).ok());
  EXPECT_EQ(restarted.Select(problem_, true)->name, "tf32");
  EXPECT_EQ(restarted.Select(problem_, false, kHost)->name, "fast");
  EXPECT_FALSE(restarted.Choose(problem_, false, kHost).calibrate);
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("matmul/float32/m1024/n1024/k1024|exact\tslow\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("matmul/float32/m1024/n1024/k1024|exact|served_from_host\tfast\n"),
            std::string::npos)
      << text.str();
  std::remove(path.c_str());
}

TEST_F(SelectTest, UnmeasuredBucketsTakeTheLowestFallbackRank) {
  kernels::Registry ranked;
  for (auto [name, reduced, rank] : {std::tuple{"slow", false, 0},
                                     {"fast", false, 2},
                                     {"faster", false, 3},
                                     {"tf32", true, 1}}) {
    kernels::Variant v = Fake(name, reduced);
    v.fallback_rank = rank;
    ASSERT_TRUE(ranked.Add(v).ok());
  }
  VariantSelector selector(ranked, kernels::Backend::kCuda);
  EXPECT_EQ(selector.Select(problem_, false)->name, "fast");
  EXPECT_EQ(selector.Select(problem_, true)->name, "tf32");
  EXPECT_EQ(selector.Choose(problem_, false).variant->name, "fast");
  // Without ranks: the first variant of the ladder that applies.
  VariantSelector unranked(registry_, kernels::Backend::kCuda);
  EXPECT_EQ(unranked.Select(problem_, true)->name, "slow");
  kernels::Problem f64 = problem_;
  f64.dtype = kernels::DType::kFloat64;
  EXPECT_EQ(unranked.Select(f64, true), nullptr);
}

// A variant that reads and writes host memory in place spares a small
// request its copies, which a kernel's time does not show: it wins when it
// is within 2 us of the fastest, and only then.
TEST_F(SelectTest, AZeroCopyVariantWinsWhenWithinTwoMicrosecondsOfTheFastest) {
  kernels::Registry ladder;
  for (auto [name, zero_copy] : {std::pair{"copies", false}, {"in_place", true}}) {
    kernels::Variant v = Fake(name, false);
    v.zero_copy = zero_copy;
    ASSERT_TRUE(ladder.Add(v).ok());
  }
  auto measured = [&](double copies, double in_place) {
    std::vector<VariantMeasurement> out;
    for (auto [name, t] : {std::pair{"copies", copies}, {"in_place", in_place}}) {
      VariantMeasurement m;
      m.variant = ladder.Find(kernels::Op::kMatMul, kernels::Backend::kCuda, name);
      m.ok = true;
      m.times_us = {t, t + 0.1, t - 0.1};
      out.push_back(m);
    }
    return out;
  };
  VariantSelector selector(ladder, kernels::Backend::kCuda);
  for (auto [copies, in_place, chosen] : {std::tuple{3.0, 4.5, "in_place"},
                                          {3.0, 5.5, "copies"},
                                          {100.0, 101.9, "in_place"},
                                          {100.0, 102.5, "copies"},
                                          {5.0, 4.0, "in_place"}}) {
    selector.Record(problem_, measured(copies, in_place));
    EXPECT_EQ(selector.Select(problem_, false)->name, chosen) << copies << " vs " << in_place;
  }
  // A zero-copy variant with a wrong result is not chosen.
  auto wrong = measured(3.0, 3.0);
  wrong[1].ok = false;
  selector.Record(problem_, wrong);
  EXPECT_EQ(selector.Select(problem_, false)->name, "copies");
  // Timed as served, the copies are in the times: the fastest wins, by any
  // margin.
  for (auto [copies, in_place, chosen] :
       {std::tuple{3.0, 4.5, "copies"}, {100.0, 100.5, "copies"}, {5.0, 4.9, "in_place"}}) {
    auto as_served = measured(copies, in_place);
    for (VariantMeasurement& m : as_served) m.timed_as_served = true;
    selector.Record(problem_, as_served);
    EXPECT_EQ(selector.Select(problem_, false)->name, chosen) << copies << " vs " << in_place;
  }
}

// A request that names a variant: null for "auto" and no name; refusals
// say why, naming the variant, the ones there are, or the dtypes it takes.
TEST_F(SelectTest, ARequestedVariantMustExistAndTakeTheDType) {
  const VariantSelector selector(registry_, kernels::Backend::kCuda);
  auto words = [](kernels::DType d) { return std::string("<") + kernels::DTypeName(d) + ">"; };
  VariantSelector::DTypeNamer* namer = +words;
  const auto unknown = selector.Requested(problem_, "nope", namer);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(),
            "unknown matmul variant \"nope\" on the cuda backend; available: auto, slow, fast, "
            "tf32");
  kernels::Problem f64 = problem_;
  f64.dtype = kernels::DType::kFloat64;
  const auto unsupported = selector.Requested(f64, "fast", namer);
  EXPECT_EQ(unsupported.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unsupported.status().message(),
            "variant \"fast\" does not support <float64> (it supports <float32>)");
  for (const char* chooses : {"", "auto"}) {
    auto automatic = selector.Requested(problem_, chooses, namer);
    ASSERT_TRUE(automatic.ok()) << chooses;
    EXPECT_EQ(*automatic, nullptr);
  }
  auto named = selector.Requested(problem_, "tf32", namer);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ((*named)->name, "tf32");
}

// The fallbacks the built-in ladders give, as the name list they replaced did.
TEST(DefaultLadders, FallbackChoices) {
  const kernels::Registry& registry = kernels::DefaultRegistry();
  auto fallback = [&](kernels::Backend backend, kernels::Op op, kernels::DType dtype,
                      bool allow_reduced) {
    kernels::Problem p;
    p.op = op;
    p.dtype = dtype;
    const kernels::Variant* v = VariantSelector(registry, backend).Select(p, allow_reduced);
    return v ? v->name : std::string("(none)");
  };
  using kernels::Backend, kernels::DType, kernels::Op;
  for (Op op : {Op::kMatMul, Op::kTranspose, Op::kReduce}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      EXPECT_EQ(fallback(Backend::kCpu, op, dtype, true), "cpu_reference");
    }
  }
  if (!kernels::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: no CUDA ladders";
  EXPECT_EQ(fallback(Backend::kCuda, Op::kMatMul, DType::kFloat32, false), "cublas");
  EXPECT_EQ(fallback(Backend::kCuda, Op::kMatMul, DType::kFloat32, true), "cublas_tf32");
  EXPECT_EQ(fallback(Backend::kCuda, Op::kMatMul, DType::kFloat64, true), "cublas");
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    EXPECT_EQ(fallback(Backend::kCuda, Op::kTranspose, dtype, false), "cublas");
    EXPECT_EQ(fallback(Backend::kCuda, Op::kReduce, dtype, false), "cub");
  }
}

}  // namespace
}  // namespace gpucompute::server
