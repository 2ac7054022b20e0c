// The GPU gauges without a GPU: NVML replaced by a table of fake entry
// points (the real NvmlTelemetry reads them), and the sampler fed by a fake
// GpuTelemetry. A missing library, a missing device and a failing call leave
// the gauges absent and say so; they never stop the server.
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/ops/gpu_sampler.h"
#include "server/ops/nvml_telemetry.h"

namespace gpucompute::server {
namespace {

constexpr char kBusId[] = "00000000:3B:00.0";
constexpr int64_t kPid = 4242;

// What the fake driver answers; reset by each test.
struct FakeDriver {
  nvml::Return init = nvml::NVML_SUCCESS;
  bool has_device = true;
  nvml::Return power = nvml::NVML_SUCCESS;
  nvml::Return utilization = nvml::NVML_SUCCESS;
  int lookups = 0;
  int shutdowns = 0;
};
FakeDriver driver;
nvml::Device const kHandle = reinterpret_cast<nvml::Device>(0x1234);

nvml::Return Init() { return driver.init; }
nvml::Return Shutdown() {
  ++driver.shutdowns;
  return nvml::NVML_SUCCESS;
}
const char* ErrorString(nvml::Return rc) {
  return rc == nvml::NVML_ERROR_NOT_FOUND ? "Not Found" : "fake error";
}
nvml::Return ByBusId(const char* bus_id, nvml::Device* device) {
  ++driver.lookups;
  if (!driver.has_device || std::string(bus_id) != kBusId) return nvml::NVML_ERROR_NOT_FOUND;
  *device = kHandle;
  return nvml::NVML_SUCCESS;
}
nvml::Return Utilization(nvml::Device, nvml::Utilization* u) {
  *u = {87, 40};
  return driver.utilization;
}
nvml::Return MemoryInfo(nvml::Device, nvml::Memory* m) {
  *m = {141ull << 30, 100ull << 30, 41ull << 30};
  return nvml::NVML_SUCCESS;
}
nvml::Return Power(nvml::Device, unsigned int* mw) {
  *mw = 512345;
  return driver.power;
}
nvml::Return PowerLimit(nvml::Device, unsigned int* mw) {
  *mw = 700000;
  return nvml::NVML_SUCCESS;
}
nvml::Return Temperature(nvml::Device, int sensor, unsigned int* c) {
  *c = 61;
  return sensor == nvml::NVML_TEMPERATURE_GPU ? nvml::NVML_SUCCESS : nvml::NVML_ERROR_NOT_SUPPORTED;
}
nvml::Return Clock(nvml::Device, int type, unsigned int* mhz) {
  *mhz = 1980;
  return type == nvml::NVML_CLOCK_SM ? nvml::NVML_SUCCESS : nvml::NVML_ERROR_NOT_SUPPORTED;
}
nvml::Return Throttle(nvml::Device, unsigned long long* reasons) {
  *reasons = nvml::nvmlClocksThrottleReasonSwPowerCap | nvml::nvmlClocksThrottleReasonHwSlowdown;
  return nvml::NVML_SUCCESS;
}
nvml::Return Pcie(nvml::Device, int counter, unsigned int* kbs) {
  *kbs = counter == nvml::NVML_PCIE_UTIL_TX_BYTES ? 1000 : 2000;
  return nvml::NVML_SUCCESS;
}
// Two processes, this one second; asks for room first, as the driver does.
nvml::Return Processes(nvml::Device, unsigned int* count, nvml::ProcessInfo* infos) {
  if (*count < 2) {
    *count = 2;
    return nvml::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  infos[0] = {1, 5ull << 30, 0, 0};
  infos[1] = {unsigned(kPid), 3ull << 30, 0, 0};
  *count = 2;
  return nvml::NVML_SUCCESS;
}
// Links 0 and 1 carry data; the others are not there.
nvml::Return Fields(nvml::Device, int n, nvml::FieldValue* values) {
  for (int i = 0; i < n; ++i) {
    nvml::FieldValue& f = values[i];
    if (f.scopeId > 1) {
      f.nvmlReturn = nvml::NVML_ERROR_NOT_SUPPORTED;
      continue;
    }
    f.nvmlReturn = nvml::NVML_SUCCESS;
    f.valueType = nvml::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    f.value.ullVal = f.fieldId == nvml::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? 10 : 20;
  }
  return nvml::NVML_SUCCESS;
}

NvmlApi FakeApi() {
  NvmlApi api;
  api.init = Init;
  api.shutdown = Shutdown;
  api.error_string = ErrorString;
  api.handle_by_pci_bus_id = ByBusId;
  api.utilization_rates = Utilization;
  api.memory_info = MemoryInfo;
  api.power_usage = Power;
  api.enforced_power_limit = PowerLimit;
  api.temperature = Temperature;
  api.clock_info = Clock;
  api.throttle_reasons = Throttle;
  api.pcie_throughput = Pcie;
  api.running_processes = Processes;
  api.field_values = Fields;
  return api;
}

class NvmlTelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override { driver = FakeDriver{}; }
};

TEST_F(NvmlTelemetryTest, ReadsEveryGaugeInBaseUnits) {
  auto telemetry = OpenNvmlTelemetry(FakeApi(), kPid);
  ASSERT_TRUE(telemetry.ok()) << telemetry.status();
  auto r = (*telemetry)->Read(kBusId);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(*r->utilization, 0.87);
  EXPECT_DOUBLE_EQ(*r->memory_utilization, 0.40);
  EXPECT_EQ(*r->memory_total_bytes, int64_t{141} << 30);
  EXPECT_EQ(*r->memory_used_bytes, int64_t{41} << 30);
  EXPECT_EQ(*r->memory_used_by_server_bytes, int64_t{3} << 30);
  EXPECT_DOUBLE_EQ(*r->power_watts, 512.345);
  EXPECT_DOUBLE_EQ(*r->power_limit_watts, 700);
  EXPECT_DOUBLE_EQ(*r->temperature_celsius, 61);
  EXPECT_DOUBLE_EQ(*r->sm_clock_hertz, 1980e6);
  EXPECT_EQ(*r->throttle_reasons, 0xCu);
  EXPECT_DOUBLE_EQ(*r->pcie_tx_bytes_per_second, 1000 * 1024.0);
  EXPECT_DOUBLE_EQ(*r->pcie_rx_bytes_per_second, 2000 * 1024.0);
  EXPECT_EQ(*r->nvlink_tx_bytes, 2 * 10 * 1024);
  EXPECT_EQ(*r->nvlink_rx_bytes, 2 * 20 * 1024);
  // The handle is looked up once, then kept.
  ASSERT_TRUE((*telemetry)->Read(kBusId).ok());
  EXPECT_EQ(driver.lookups, 1);
  telemetry->reset();
  EXPECT_EQ(driver.shutdowns, 1);
}

TEST_F(NvmlTelemetryTest, AFailingCallLeavesOnlyItsGaugeAbsent) {
  driver.power = nvml::NVML_ERROR_NOT_SUPPORTED;
  auto telemetry = OpenNvmlTelemetry(FakeApi(), kPid);
  ASSERT_TRUE(telemetry.ok());
  auto r = (*telemetry)->Read(kBusId);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->power_watts.has_value());
  EXPECT_TRUE(r->power_limit_watts.has_value());
  EXPECT_TRUE(r->utilization.has_value());
}

TEST_F(NvmlTelemetryTest, EntryPointsAnOlderDriverLacksAreAbsentGauges) {
  NvmlApi api = FakeApi();
  api.field_values = nullptr;
  api.running_processes = nullptr;
  api.throttle_reasons = nullptr;
  auto telemetry = OpenNvmlTelemetry(api, kPid);
  ASSERT_TRUE(telemetry.ok());
  auto r = (*telemetry)->Read(kBusId);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->nvlink_tx_bytes.has_value());
  EXPECT_FALSE(r->memory_used_by_server_bytes.has_value());
  EXPECT_FALSE(r->throttle_reasons.has_value());
  EXPECT_TRUE(r->memory_used_bytes.has_value());
}

TEST_F(NvmlTelemetryTest, AMissingDeviceIsAnErrorNamingIt) {
  driver.has_device = false;
  auto telemetry = OpenNvmlTelemetry(FakeApi(), kPid);
  ASSERT_TRUE(telemetry.ok());
  auto r = (*telemetry)->Read(kBusId);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(kBusId), std::string::npos) << r.status();
}

TEST_F(NvmlTelemetryTest, ALostGpuIsLookedUpAgainNextTime) {
  auto telemetry = OpenNvmlTelemetry(FakeApi(), kPid);
  ASSERT_TRUE(telemetry.ok());
  driver.utilization = nvml::NVML_ERROR_GPU_IS_LOST;
  EXPECT_FALSE((*telemetry)->Read(kBusId).ok());
  driver.utilization = nvml::NVML_SUCCESS;
  EXPECT_TRUE((*telemetry)->Read(kBusId).ok());
  EXPECT_EQ(driver.lookups, 2);
}

TEST_F(NvmlTelemetryTest, AFailedInitIsAnError) {
  driver.init = nvml::NVML_ERROR_UNKNOWN;
  auto telemetry = OpenNvmlTelemetry(FakeApi(), kPid);
  EXPECT_EQ(telemetry.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(driver.shutdowns, 0);
}

TEST(LoadNvml, AMissingLibraryIsAnErrorNamingIt) {
  auto api = LoadNvml("libgpucompute-no-such-nvml.so.1");
  ASSERT_FALSE(api.ok());
  EXPECT_EQ(api.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(api.status().message().find("libgpucompute-no-such-nvml.so.1"), std::string::npos);
}

// ---- the sampler, over a fake GpuTelemetry ----

class FakeTelemetry final : public GpuTelemetry {
 public:
  explicit FakeTelemetry(absl::StatusOr<GpuReading> reading) : reading_(std::move(reading)) {}
  absl::StatusOr<GpuReading> Read(const std::string&) override { return reading_; }

 private:
  absl::StatusOr<GpuReading> reading_;
};

GpuReading FullReading() {
  GpuReading r;
  r.utilization = 0.5;
  r.memory_utilization = 0.25;
  r.memory_total_bytes = 100;
  r.memory_used_bytes = 60;
  r.memory_used_by_server_bytes = 40;
  r.power_watts = 300;
  r.power_limit_watts = 700;
  r.temperature_celsius = 55;
  r.sm_clock_hertz = 1.98e9;
  r.throttle_reasons = nvml::nvmlClocksThrottleReasonSwThermalSlowdown;
  r.pcie_tx_bytes_per_second = 1;
  r.pcie_rx_bytes_per_second = 2;
  r.nvlink_tx_bytes = 3;
  r.nvlink_rx_bytes = 4;
  return r;
}

std::string Text(const GpuSampler& sampler) {
  return prometheus::TextSerializer().Serialize(sampler.Collect());
}

std::set<std::string> Families(const GpuSampler& sampler) {
  std::set<std::string> names;
  for (const auto& f : sampler.Collect()) names.insert(f.name);
  return names;
}

const std::vector<WatchedGpu> kOneGpu = {{"cuda:0", kBusId}};

TEST(GpuSampler, EveryGaugeOfAFullReading) {
  GpuSampler sampler(std::make_unique<FakeTelemetry>(FullReading()), kOneGpu, absl::ZeroDuration());
  EXPECT_EQ(sampler.problem(), "not sampled yet");
  sampler.SampleOnce();
  EXPECT_EQ(sampler.problem(), "");
  EXPECT_EQ(Families(sampler),
            (std::set<std::string>{
                "gpucompute_gpu_telemetry_up", "gpucompute_gpu_telemetry_errors_total",
                "gpucompute_gpu_utilization_ratio", "gpucompute_gpu_memory_utilization_ratio",
                "gpucompute_gpu_memory_total_bytes", "gpucompute_gpu_memory_used_bytes",
                "gpucompute_gpu_memory_used_by_server_bytes", "gpucompute_gpu_power_watts",
                "gpucompute_gpu_power_limit_watts", "gpucompute_gpu_temperature_celsius",
                "gpucompute_gpu_sm_clock_hertz", "gpucompute_gpu_throttled",
                "gpucompute_gpu_pcie_bytes_per_second", "gpucompute_gpu_nvlink_bytes_total"}));
  const std::string text = Text(sampler);
  EXPECT_NE(text.find("gpucompute_gpu_telemetry_up 1"), std::string::npos) << text;
  EXPECT_NE(text.find("gpucompute_gpu_utilization_ratio{device=\"cuda:0\"} 0.5"), std::string::npos)
      << text;
  EXPECT_NE(text.find("gpucompute_gpu_throttled{device=\"cuda:0\",reason=\"sw_thermal\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpucompute_gpu_throttled{device=\"cuda:0\",reason=\"hw_slowdown\"} 0"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("gpucompute_gpu_pcie_bytes_per_second{device=\"cuda:0\",direction=\"rx\"} 2"),
            std::string::npos)
      << text;
}

TEST(GpuSampler, NoLibraryMeansOnlyTheUpGaugeSayingZero) {
  GpuSampler sampler(absl::NotFoundError("cannot load libnvidia-ml.so.1"), kOneGpu,
                     absl::Milliseconds(10));
  sampler.SampleOnce();
  EXPECT_EQ(sampler.problem(), "cannot load libnvidia-ml.so.1");
  EXPECT_EQ(Families(sampler), (std::set<std::string>{"gpucompute_gpu_telemetry_up"}));
  EXPECT_NE(Text(sampler).find("gpucompute_gpu_telemetry_up 0"), std::string::npos);
}

TEST(GpuSampler, AnUnreadableGpuHasNoGaugesAndCountsItsErrors) {
  GpuSampler sampler(std::make_unique<FakeTelemetry>(absl::NotFoundError("no GPU at that bus id")),
                     kOneGpu, absl::ZeroDuration());
  sampler.SampleOnce();
  sampler.SampleOnce();
  EXPECT_NE(sampler.problem().find("cuda:0"), std::string::npos) << sampler.problem();
  EXPECT_EQ(Families(sampler), (std::set<std::string>{"gpucompute_gpu_telemetry_up",
                                                      "gpucompute_gpu_telemetry_errors_total"}));
  const std::string text = Text(sampler);
  EXPECT_NE(text.find("gpucompute_gpu_telemetry_up 0"), std::string::npos) << text;
  EXPECT_NE(text.find("gpucompute_gpu_telemetry_errors_total{device=\"cuda:0\"} 2"),
            std::string::npos)
      << text;
}

TEST(GpuSampler, TheThreadSamplesOnItsOwnAndStopsWhenDestroyed) {
  auto sampler = std::make_unique<GpuSampler>(std::make_unique<FakeTelemetry>(FullReading()),
                                              kOneGpu, absl::Milliseconds(5));
  for (int i = 0; i < 200 && sampler->problem() != ""; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(sampler->problem(), "");
  sampler.reset();  // joins the thread
}

TEST(GpuSampler, NoGpuInUse) {
  GpuSampler sampler(absl::FailedPreconditionError("no GPU in use"), {}, absl::Seconds(1));
  EXPECT_EQ(Families(sampler), (std::set<std::string>{"gpucompute_gpu_telemetry_up"}));
}

}  // namespace
}  // namespace gpucompute::server
