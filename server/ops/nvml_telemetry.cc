#include "server/ops/nvml_telemetry.h"

#include <dlfcn.h>

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

using nvml::NVML_SUCCESS;

template <typename Fn>
Fn Resolve(void* library, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* symbol = dlsym(library, name)) return reinterpret_cast<Fn>(symbol);
  }
  return nullptr;
}

// A field value as a count, whatever integer type the driver chose.
std::optional<uint64_t> Unsigned(const nvml::FieldValue& f) {
  if (f.nvmlReturn != NVML_SUCCESS) return std::nullopt;
  switch (f.valueType) {
    case nvml::NVML_VALUE_TYPE_UNSIGNED_INT: return f.value.uiVal;
    case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG: return f.value.ulVal;
    case nvml::NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return f.value.ullVal;
    case nvml::NVML_VALUE_TYPE_SIGNED_LONG_LONG:
      return f.value.sllVal >= 0 ? std::optional<uint64_t>(f.value.sllVal) : std::nullopt;
    case nvml::NVML_VALUE_TYPE_SIGNED_INT:
      return f.value.siVal >= 0 ? std::optional<uint64_t>(f.value.siVal) : std::nullopt;
    default: return std::nullopt;
  }
}

class NvmlTelemetry final : public GpuTelemetry {
 public:
  NvmlTelemetry(NvmlApi api, int64_t pid) : api_(std::move(api)), pid_(pid) {}
  ~NvmlTelemetry() override { api_.shutdown(); }

  absl::StatusOr<GpuReading> Read(const std::string& pci_bus_id) override {
    auto device = Handle(pci_bus_id);
    if (!device.ok()) return device.status();
    GpuReading r;
    if (api_.utilization_rates != nullptr) {
      nvml::Utilization u{};
      const nvml::Return rc = api_.utilization_rates(*device, &u);
      if (rc == nvml::NVML_ERROR_GPU_IS_LOST) return Lost(pci_bus_id, rc);
      if (rc == NVML_SUCCESS) {
        r.utilization = u.gpu / 100.0;
        r.memory_utilization = u.memory / 100.0;
      }
    }
    if (nvml::Memory m{};
        api_.memory_info != nullptr && api_.memory_info(*device, &m) == NVML_SUCCESS) {
      r.memory_total_bytes = int64_t(m.total);
      r.memory_used_bytes = int64_t(m.used);
    }
    unsigned int value = 0;
    if (api_.power_usage != nullptr && api_.power_usage(*device, &value) == NVML_SUCCESS) {
      r.power_watts = value / 1000.0;
    }
    if (api_.enforced_power_limit != nullptr &&
        api_.enforced_power_limit(*device, &value) == NVML_SUCCESS) {
      r.power_limit_watts = value / 1000.0;
    }
    if (api_.temperature != nullptr &&
        api_.temperature(*device, nvml::NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
      r.temperature_celsius = value;
    }
    if (api_.clock_info != nullptr &&
        api_.clock_info(*device, nvml::NVML_CLOCK_SM, &value) == NVML_SUCCESS) {
      r.sm_clock_hertz = value * 1e6;
    }
    if (unsigned long long reasons = 0; api_.throttle_reasons != nullptr &&
                                        api_.throttle_reasons(*device, &reasons) == NVML_SUCCESS) {
      r.throttle_reasons = reasons;
    }
    // NVML's KB here is 1024 bytes, as in the rest of its byte counts.
    if (api_.pcie_throughput != nullptr) {
      if (api_.pcie_throughput(*device, nvml::NVML_PCIE_UTIL_TX_BYTES, &value) == NVML_SUCCESS) {
        r.pcie_tx_bytes_per_second = value * 1024.0;
      }
      if (api_.pcie_throughput(*device, nvml::NVML_PCIE_UTIL_RX_BYTES, &value) == NVML_SUCCESS) {
        r.pcie_rx_bytes_per_second = value * 1024.0;
      }
    }
    r.memory_used_by_server_bytes = OwnMemory(*device);
    ReadNvLink(*device, r);
    return r;
  }

 private:
  absl::StatusOr<nvml::Device> Handle(const std::string& pci_bus_id) {
    if (auto it = handles_.find(pci_bus_id); it != handles_.end()) return it->second;
    nvml::Device device = nullptr;
    const nvml::Return rc = api_.handle_by_pci_bus_id(pci_bus_id.c_str(), &device);
    if (rc != NVML_SUCCESS) {
      return absl::NotFoundError(
          absl::StrCat("NVML has no GPU at PCI bus id ", pci_bus_id, ": ", Error(rc)));
    }
    handles_.emplace(pci_bus_id, device);
    return device;
  }

  // A lost GPU's handle is dropped, so that a GPU back after a reset is
  // looked up again.
  absl::Status Lost(const std::string& pci_bus_id, nvml::Return rc) {
    handles_.erase(pci_bus_id);
    return absl::UnavailableError(absl::StrCat("GPU ", pci_bus_id, ": ", Error(rc)));
  }

  std::string Error(nvml::Return rc) const {
    const char* text = api_.error_string != nullptr ? api_.error_string(rc) : nullptr;
    return text != nullptr ? std::string(text) : absl::StrCat("NVML error ", rc);
  }

  // This process's device memory, from the driver's list of compute
  // processes. Absent when the list cannot be read, or does not hold this
  // pid (a container without the host's pid namespace sees other pids).
  std::optional<int64_t> OwnMemory(nvml::Device device) {
    if (api_.running_processes == nullptr) return std::nullopt;
    // The list can grow between the size query and the read: retry a few times.
    for (int attempt = 0; attempt < 3; ++attempt) {
      unsigned int count = static_cast<unsigned int>(processes_.size());
      const nvml::Return rc =
          api_.running_processes(device, &count, processes_.empty() ? nullptr : processes_.data());
      if (rc == nvml::NVML_ERROR_INSUFFICIENT_SIZE) {
        processes_.resize(count + 8);
        continue;
      }
      if (rc != NVML_SUCCESS) return std::nullopt;
      for (unsigned int i = 0; i < count && i < processes_.size(); ++i) {
        if (int64_t(processes_[i].pid) == pid_) return int64_t(processes_[i].usedGpuMemory);
      }
      return std::nullopt;
    }
    return std::nullopt;
  }

  // NVLink data counters, summed over the links that answer; absent on a
  // part without NVLink (every link answers an error).
  void ReadNvLink(nvml::Device device, GpuReading& r) {
    if (api_.field_values == nullptr) return;
    std::vector<nvml::FieldValue> fields;
    for (unsigned int link = 0; link < nvml::kMaxNvLinks; ++link) {
      for (unsigned int id : {nvml::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                              nvml::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX}) {
        nvml::FieldValue f{};
        f.fieldId = id;
        f.scopeId = link;
        fields.push_back(f);
      }
    }
    if (api_.field_values(device, int(fields.size()), fields.data()) != NVML_SUCCESS) return;
    std::optional<int64_t> tx, rx;
    for (const nvml::FieldValue& f : fields) {
      const std::optional<uint64_t> kib = Unsigned(f);
      if (!kib) continue;
      auto& total = f.fieldId == nvml::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? tx : rx;
      total = total.value_or(0) + int64_t(*kib) * 1024;
    }
    r.nvlink_tx_bytes = tx;
    r.nvlink_rx_bytes = rx;
  }

  const NvmlApi api_;
  const int64_t pid_;
  absl::flat_hash_map<std::string, nvml::Device> handles_;
  std::vector<nvml::ProcessInfo> processes_;
};

}  // namespace

absl::StatusOr<NvmlApi> LoadNvml(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(
        absl::StrCat("cannot load ", library, ": ", why != nullptr ? why : "dlopen failed"));
  }
  NvmlApi api;
  api.library = std::shared_ptr<void>(handle, [](void* h) { dlclose(h); });
  api.init = Resolve<nvml::InitFn>(handle, {"nvmlInit_v2"});
  api.shutdown = Resolve<nvml::ShutdownFn>(handle, {"nvmlShutdown"});
  api.error_string = Resolve<nvml::ErrorStringFn>(handle, {"nvmlErrorString"});
  api.handle_by_pci_bus_id =
      Resolve<nvml::HandleByPciBusIdFn>(handle, {"nvmlDeviceGetHandleByPciBusId_v2"});
  api.utilization_rates =
      Resolve<nvml::UtilizationRatesFn>(handle, {"nvmlDeviceGetUtilizationRates"});
  api.memory_info = Resolve<nvml::MemoryInfoFn>(handle, {"nvmlDeviceGetMemoryInfo"});
  api.power_usage = Resolve<nvml::PowerFn>(handle, {"nvmlDeviceGetPowerUsage"});
  api.enforced_power_limit = Resolve<nvml::PowerFn>(handle, {"nvmlDeviceGetEnforcedPowerLimit"});
  api.temperature = Resolve<nvml::TemperatureFn>(handle, {"nvmlDeviceGetTemperature"});
  api.clock_info = Resolve<nvml::ClockInfoFn>(handle, {"nvmlDeviceGetClockInfo"});
  api.throttle_reasons = Resolve<nvml::ThrottleReasonsFn>(
      handle,
      {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  api.pcie_throughput = Resolve<nvml::PcieThroughputFn>(handle, {"nvmlDeviceGetPcieThroughput"});
  api.running_processes = Resolve<nvml::RunningProcessesFn>(
      handle,
      {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  api.field_values = Resolve<nvml::FieldValuesFn>(handle, {"nvmlDeviceGetFieldValues"});
  for (auto [fn, name] :
       {std::pair{reinterpret_cast<void*>(api.init), "nvmlInit_v2"},
        {reinterpret_cast<void*>(api.shutdown), "nvmlShutdown"},
        {reinterpret_cast<void*>(api.handle_by_pci_bus_id), "nvmlDeviceGetHandleByPciBusId_v2"}}) {
    if (fn == nullptr) return absl::NotFoundError(absl::StrCat(library, " has no ", name));
  }
  return api;
}

absl::StatusOr<std::unique_ptr<GpuTelemetry>> OpenNvmlTelemetry(NvmlApi api, int64_t pid) {
  if (api.init == nullptr || api.shutdown == nullptr || api.handle_by_pci_bus_id == nullptr) {
    return absl::InvalidArgumentError(
        "NVML: nvmlInit_v2, nvmlShutdown and "
        "nvmlDeviceGetHandleByPciBusId_v2 are required");
  }
  if (const nvml::Return rc = api.init(); rc != NVML_SUCCESS) {
    const char* text = api.error_string != nullptr ? api.error_string(rc) : nullptr;
    return absl::UnavailableError(
        absl::StrCat("nvmlInit_v2 failed: ", text != nullptr ? text : absl::StrCat("error ", rc)));
  }
  return std::unique_ptr<GpuTelemetry>(std::make_unique<NvmlTelemetry>(std::move(api), pid));
}

}  // namespace gpucompute::server
