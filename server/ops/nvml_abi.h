// The few NVML (NVIDIA Management Library) C declarations the GPU gauges
// call, written from NVIDIA's NVML API reference. Why not <nvml.h>: not every
// CUDA toolkit ships it (the build must not download anything), and the
// server loads the driver's libnvidia-ml.so.1 with dlopen at run time, so
// that a host without the driver still serves: only these types, constants
// and function signatures are needed, never a link against the library.
// Every name below keeps NVML's spelling so it can be checked against the
// reference; the functions are pointer types, resolved with dlsym.
#pragma once

#include <cstdint>

namespace gpucompute::server::nvml {

// nvmlReturn_t (a C enum: int-sized).
using Return = int;
constexpr Return NVML_SUCCESS = 0;
constexpr Return NVML_ERROR_NOT_SUPPORTED = 3;
constexpr Return NVML_ERROR_NOT_FOUND = 6;
constexpr Return NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr Return NVML_ERROR_GPU_IS_LOST = 15;
constexpr Return NVML_ERROR_UNKNOWN = 999;

// nvmlDevice_t: an opaque handle owned by the library.
using Device = struct nvmlDevice_st*;

// nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s,
// by product) during which a kernel ran / device memory was read or written.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

// nvmlMemory_t (version 1), bytes; `used` is by every process and the driver.
struct Memory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// nvmlProcessInfo_t as the _v2 and _v3 process queries fill it.
struct ProcessInfo {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlValue_t / nvmlFieldValue_t, for nvmlDeviceGetFieldValues.
union Value {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
};
struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;  // for NVLink counters: the link
  long long timestamp;
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  Return nvmlReturn;
  Value value;
};
constexpr int NVML_VALUE_TYPE_DOUBLE = 0;
constexpr int NVML_VALUE_TYPE_UNSIGNED_INT = 1;
constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG = 2;
constexpr int NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3;
constexpr int NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4;
constexpr int NVML_VALUE_TYPE_SIGNED_INT = 5;

// NVLink data bytes since the driver loaded, KiB, per link (scopeId).
constexpr unsigned int NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138;
constexpr unsigned int NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139;
// NVLINK_MAX_LINKS of the newest parts (18 on Hopper).
constexpr unsigned int kMaxNvLinks = 18;

constexpr int NVML_TEMPERATURE_GPU = 0;     // nvmlTemperatureSensors_t
constexpr int NVML_CLOCK_SM = 1;            // nvmlClockType_t, MHz
constexpr int NVML_PCIE_UTIL_TX_BYTES = 0;  // nvmlPcieUtilCounter_t, KB/s over 20 ms
constexpr int NVML_PCIE_UTIL_RX_BYTES = 1;

// nvmlClocksThrottleReasons (renamed nvmlClocksEventReasons in newer
// releases, same bits).
constexpr unsigned long long nvmlClocksThrottleReasonGpuIdle = 0x1;
constexpr unsigned long long nvmlClocksThrottleReasonApplicationsClocksSetting = 0x2;
constexpr unsigned long long nvmlClocksThrottleReasonSwPowerCap = 0x4;
constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8;
constexpr unsigned long long nvmlClocksThrottleReasonSyncBoost = 0x10;
constexpr unsigned long long nvmlClocksThrottleReasonSwThermalSlowdown = 0x20;
constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40;
constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80;
constexpr unsigned long long nvmlClocksThrottleReasonDisplayClockSetting = 0x100;

// Entry points (C linkage in the library; called through these pointers).
using InitFn = Return (*)();                                  // nvmlInit_v2
using ShutdownFn = Return (*)();                              // nvmlShutdown
using ErrorStringFn = const char* (*)(Return);                // nvmlErrorString
using HandleByPciBusIdFn = Return (*)(const char*, Device*);  // nvmlDeviceGetHandleByPciBusId_v2
using UtilizationRatesFn = Return (*)(Device, Utilization*);  // nvmlDeviceGetUtilizationRates
using MemoryInfoFn = Return (*)(Device, Memory*);             // nvmlDeviceGetMemoryInfo
// nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit: milliwatts.
using PowerFn = Return (*)(Device, unsigned int*);
using TemperatureFn = Return (*)(Device, int, unsigned int*);  // nvmlDeviceGetTemperature
using ClockInfoFn = Return (*)(Device, int, unsigned int*);    // nvmlDeviceGetClockInfo
// nvmlDeviceGetCurrentClocksEventReasons (or ...ThrottleReasons before it).
using ThrottleReasonsFn = Return (*)(Device, unsigned long long*);
using PcieThroughputFn = Return (*)(Device, int, unsigned int*);  // nvmlDeviceGetPcieThroughput
// nvmlDeviceGetComputeRunningProcesses_v3 (or _v2).
using RunningProcessesFn = Return (*)(Device, unsigned int*, ProcessInfo*);
using FieldValuesFn = Return (*)(Device, int, FieldValue*);  // nvmlDeviceGetFieldValues

}  // namespace gpucompute::server::nvml
