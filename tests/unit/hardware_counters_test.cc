// Profile's hardware counters without a GPU: a fake profiler stands in for
// CUPTI. What a reading becomes in a row (values with units and meanings,
// or a note saying why there are none: no permission, no library, metrics
// the chip lacks), that a failed launch is an error and not a note, and
// that each comparison names its counter before and after and says whether
// it moved as the lesson predicts.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "server/engine/hardware_counters.h"
#include "server/engine/lessons.h"
#include "server/grpc/profile_response.h"

namespace gpucompute::server {
namespace {

using kernels::Op;

// The problem the transpose rows below read counters for.
const kernels::Problem kTranspose{Op::kTranspose, kernels::DType::kFloat32, 256, 256, 1};

// Answers every metric from a table (absent: the chip lacks it), or fails
// with `error`; runs the replay `passes` times, as a profiler does.
class FakeCounterReader : public CounterReader {
 public:
  std::map<std::string, double> values;
  absl::Status error = absl::OkStatus();
  int passes = 3;
  int launches = 0;

  absl::StatusOr<std::vector<std::optional<double>>> Read(
      absl::Span<const std::string_view> metrics, const CounterReplay& replay) override {
    if (!error.ok()) return error;
    for (int i = 0; i < passes; ++i) {
      if (auto s = replay.prepare(); !s.ok()) return s;
      if (auto s = replay.launch(); !s.ok()) return absl::InternalError("pass failed");
      ++launches;
    }
    std::vector<std::optional<double>> out;
    for (std::string_view m : metrics) {
      auto it = values.find(std::string(m));
      out.push_back(it == values.end() ? std::nullopt : std::optional<double>(it->second));
    }
    return out;
  }
};

kernels::Variant Variant(Op op, const std::string& name, bool tensor_cores = false) {
  kernels::Variant v;
  v.op = op;
  v.name = name;
  v.description = name;
  v.backend = kernels::Backend::kCuda;
  v.reduced_precision = tensor_cores;
  return v;
}

// `v` as the ladder row after `before` declares it: the idea and its counter.
kernels::Variant Teaching(kernels::Variant v, int rung, std::string_view before,
                          std::string_view idea, std::string_view counter) {
  v.rung = rung;
  v.lesson = {.before = before, .idea = idea, .text = idea, .counter = counter};
  return v;
}

CounterReplay Replay(int* prepared = nullptr) {
  return {[prepared] {
            if (prepared) ++*prepared;
            return absl::OkStatus();
          },
          [] { return absl::OkStatus(); }};
}

constexpr char kLoadConflicts[] = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum";
constexpr char kStoreSectors[] =
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio";
constexpr char kTensorPipe[] =
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active";

TEST(HardwareCountersTest, TheTableNamesEachCounterTheIssueAsksFor) {
  for (const char* metric :
       {kLoadConflicts, "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        "dram__bytes_read.sum", "dram__bytes_write.sum",
        "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio", kStoreSectors,
        "lts__t_sector_hit_rate.pct", "sm__warps_active.avg.pct_of_peak_sustained_active",
        "smsp__thread_inst_executed_per_inst_executed.ratio",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed", kTensorPipe}) {
    const CounterSpec* c = FindCounter(metric);
    ASSERT_NE(c, nullptr) << metric;
    EXPECT_FALSE(c->unit.empty()) << metric;
    EXPECT_FALSE(c->meaning.empty()) << metric;
    EXPECT_EQ(c->meaning.find('\n'), std::string_view::npos) << metric;
  }
  // Tensor-pipe utilization and cp.async wavefronts only where tensor cores
  // may run: TF32, and any MatMul of 16-bit inputs (the SIMT rung of the
  // tensor-core lesson too).
  kernels::Problem f32{Op::kMatMul, kernels::DType::kFloat32, 64, 64, 64};
  kernels::Problem bf16{Op::kMatMul, kernels::DType::kBFloat16, 64, 64, 64};
  const auto plain = CountersFor(Variant(Op::kMatMul, "tiled32"), f32);
  const auto tensor = CountersFor(Variant(Op::kMatMul, "cublas_tf32", true), f32);
  const auto half = CountersFor(Variant(Op::kMatMul, "tiled32"), bf16);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kTensorPipe), 0);
  EXPECT_EQ(std::count(tensor.begin(), tensor.end(), kTensorPipe), 1);
  EXPECT_EQ(std::count(half.begin(), half.end(), kTensorPipe), 1);
  EXPECT_EQ(tensor.size(), plain.size() + 2);
  EXPECT_EQ(half.size(), tensor.size());
}

TEST(HardwareCountersTest, ValuesCarryUnitsAndMeaningsAndMissingOnesAreNamed) {
  FakeCounterReader reader;
  for (const CounterSpec& c : ProfileCounters()) reader.values[std::string(c.metric)] = 7;
  reader.values.erase("lts__t_sector_hit_rate.pct");
  int prepared = 0;
  auto got =
      ReadVariantCounters(reader, Variant(Op::kTranspose, "shared"), kTranspose, Replay(&prepared));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(prepared, reader.passes);  // the flush before every pass
  EXPECT_EQ(got->values.size(),
            CountersFor(Variant(Op::kTranspose, "shared"), kTranspose).size() - 1);
  for (const CounterValue& v : got->values) {
    EXPECT_EQ(v.value, 7);
    EXPECT_EQ(v.unit, FindCounter(v.metric)->unit);
    EXPECT_EQ(v.meaning, FindCounter(v.metric)->meaning);
  }
  EXPECT_EQ(got->note, "this device has no lts__t_sector_hit_rate.pct");
}

TEST(HardwareCountersTest, NoPermissionBecomesANoteThatSaysWhatGrantsIt) {
  FakeCounterReader reader;
  reader.error = absl::PermissionDeniedError(
      "this process may not read GPU performance counters "
      "(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES from cuptiRangeProfilerEnable)");
  auto got = ReadVariantCounters(reader, Variant(Op::kTranspose, "naive"), kTranspose, Replay());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->values.empty());
  EXPECT_NE(got->note.find("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), std::string::npos) << got->note;
  EXPECT_NE(got->note.find("--cap-add SYS_ADMIN"), std::string::npos) << got->note;
  EXPECT_NE(got->note.find("NVreg_RestrictProfilingToAdminUsers=0"), std::string::npos);

  reader.error = absl::UnavailableError("the CUPTI library libcupti.so.13 could not be loaded");
  got = ReadVariantCounters(reader, Variant(Op::kTranspose, "naive"), kTranspose, Replay());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->note,
            "hardware counters not read: the CUPTI library libcupti.so.13 could not be loaded");
}

TEST(HardwareCountersTest, AFailedLaunchIsAnErrorNotANote) {
  FakeCounterReader reader;
  CounterReplay replay{[] { return absl::OkStatus(); },
                       [] { return absl::InternalError("CUDA error: an illegal memory access"); }};
  auto got = ReadVariantCounters(reader, Variant(Op::kTranspose, "naive"), kTranspose, replay);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), "CUDA error: an illegal memory access");
}

VariantMeasurement Measured(const kernels::Variant& v, double median,
                            std::vector<CounterValue> counters, std::string note = "") {
  VariantMeasurement m;
  m.variant = &v;
  m.ok = true;
  m.times_us = {median};
  m.counters = std::move(counters);
  m.counters_note = std::move(note);
  return m;
}

CounterValue Value(const char* metric, double value) {
  const CounterSpec& c = *FindCounter(metric);
  return {metric, value, std::string(c.unit), std::string(c.meaning)};
}

TEST(HardwareCountersTest, RowsAndComparisonsCarryTheCounters) {
  const kernels::Variant naive = Variant(Op::kTranspose, "naive");
  const kernels::Variant shared =
      Teaching(Variant(Op::kTranspose, "shared"), 1, "naive", "coalescing", kStoreSectors);
  const kernels::Variant padded = Teaching(Variant(Op::kTranspose, "shared_padded"), 2, "shared",
                                           "bank conflicts", kLoadConflicts);
  const kernels::Variant swizzled = Teaching(Variant(Op::kTranspose, "shared_swizzled"), 3,
                                             "shared_padded", "swizzle vs padding", kLoadConflicts);
  const std::vector<VariantMeasurement> measured = {
      Measured(naive, 340, {Value(kStoreSectors, 32), Value(kLoadConflicts, 0)}),
      Measured(shared, 100, {Value(kStoreSectors, 4), Value(kLoadConflicts, 16.2e6)}),
      Measured(padded, 52, {Value(kStoreSectors, 4), Value(kLoadConflicts, 0)}),
      // Swizzling that conflicts more than padding: not what the lesson says.
      Measured(swizzled, 53, {Value(kStoreSectors, 4), Value(kLoadConflicts, 9)}),
  };
  const kernels::Problem p{
      .op = Op::kTranspose, .dtype = kernels::DType::kFloat32, .m = 4096, .n = 4096};
  DeviceDescription device;
  device.name = "cuda:0 fake";
  device.backend = kernels::Backend::kCuda;
  v1::ProfileResponse response;
  FillProfileResponse(p, measured, device, Ceilings{}, "", &response, true);

  ASSERT_EQ(response.variants_size(), 4);
  const v1::VariantProfile& fastest = response.variants(0);
  EXPECT_EQ(fastest.variant(), "shared_padded");
  ASSERT_EQ(fastest.counters_size(), 2);
  EXPECT_EQ(fastest.counters(0).name(), kStoreSectors);
  EXPECT_EQ(fastest.counters(0).unit(), "sectors/request");
  EXPECT_FALSE(fastest.counters(0).meaning().empty());
  EXPECT_EQ(fastest.note(), "");

  ASSERT_EQ(response.comparisons_size(), 3);
  const v1::Comparison& coalescing = response.comparisons(0);
  EXPECT_EQ(coalescing.counter(), kStoreSectors);
  EXPECT_EQ(coalescing.counter_before(), 32);
  EXPECT_EQ(coalescing.counter_after(), 4);
  EXPECT_TRUE(coalescing.counter_as_predicted());
  const v1::Comparison& conflicts = response.comparisons(1);
  EXPECT_EQ(conflicts.idea(), "bank conflicts");
  EXPECT_EQ(conflicts.counter(), kLoadConflicts);
  EXPECT_EQ(conflicts.counter_before(), 16.2e6);
  EXPECT_EQ(conflicts.counter_after(), 0);
  EXPECT_TRUE(conflicts.counter_as_predicted());
  const v1::Comparison& swizzle = response.comparisons(2);
  EXPECT_EQ(swizzle.idea(), "swizzle vs padding");
  EXPECT_EQ(swizzle.counter_after(), 9);
  EXPECT_FALSE(swizzle.counter_as_predicted());
}

TEST(HardwareCountersTest, ARowWithoutCountersSaysWhyAndKeepsItsTimings) {
  const kernels::Variant naive = Variant(Op::kTranspose, "naive");
  const kernels::Variant shared =
      Teaching(Variant(Op::kTranspose, "shared"), 1, "naive", "coalescing", kStoreSectors);
  const std::string why = CountersUnreadNote(absl::PermissionDeniedError("no permission"));
  const std::vector<VariantMeasurement> measured = {Measured(naive, 340, {}, why),
                                                    Measured(shared, 100, {}, why)};
  const kernels::Problem p{
      .op = Op::kTranspose, .dtype = kernels::DType::kFloat32, .m = 64, .n = 64};
  DeviceDescription device;
  device.backend = kernels::Backend::kCuda;
  v1::ProfileResponse response;
  FillProfileResponse(p, measured, device, Ceilings{}, "", &response, true);
  for (const v1::VariantProfile& row : response.variants()) {
    EXPECT_TRUE(row.ok());
    EXPECT_GT(row.median_us(), 0);
    EXPECT_EQ(row.counters_size(), 0);
    EXPECT_EQ(row.note(), why);
  }
  ASSERT_EQ(response.comparisons_size(), 1);
  EXPECT_EQ(response.comparisons(0).counter(), "");
  EXPECT_FALSE(response.comparisons(0).counter_as_predicted());
}

TEST(LessonsTest, DivergenceIsPredictedToLowerWarpInstructions) {
  // On the H200 the average active threads per instruction barely moves
  // (31.66 -> 31.57: the tree steps are a small part of the instructions),
  // while the warp instructions halve: the counter that explains the time.
  const char* instructions = "smsp__inst_executed.sum";
  const kernels::Variant interleaved = Variant(Op::kReduce, "interleaved");
  const kernels::Variant sequential =
      Teaching(Variant(Op::kReduce, "sequential"), 1, "interleaved", "divergence", instructions);
  std::vector<TimedVariant> reduce = {{&interleaved, true, 336, {Value(instructions, 9.1e7)}},
                                      {&sequential, true, 175, {Value(instructions, 4.6e7)}}};
  auto got = MeasureLessons(reduce);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].has_counter);
  EXPECT_EQ(got[0].counter_before, 9.1e7);
  EXPECT_TRUE(got[0].counter_as_predicted);
  std::swap(reduce[0].counters, reduce[1].counters);
  got = MeasureLessons(reduce);
  EXPECT_FALSE(got[0].counter_as_predicted);
}

}  // namespace
}  // namespace gpucompute::server
