#include "server/cuda/cupti_counters.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace gpucompute::server::cuda {
namespace {

// libcupti is opened at run time, not linked: a server whose machine or
// image has no CUPTI (a slim CUDA runtime image) still starts and serves,
// and its Profile rows say that counters need the library. libcupti opens
// libnvperf_host itself, from its own directory or the library path.
struct CuptiApi {
  decltype(&cuptiGetResultString) GetResultString;
  decltype(&cuptiProfilerInitialize) ProfilerInitialize;
  decltype(&cuptiDeviceGetChipName) DeviceGetChipName;
  decltype(&cuptiProfilerGetCounterAvailability) GetCounterAvailability;
  decltype(&cuptiProfilerHostInitialize) HostInitialize;
  decltype(&cuptiProfilerHostGetMetricProperties) HostGetMetricProperties;
  decltype(&cuptiProfilerHostConfigAddMetrics) HostConfigAddMetrics;
  decltype(&cuptiProfilerHostGetConfigImageSize) HostGetConfigImageSize;
  decltype(&cuptiProfilerHostGetConfigImage) HostGetConfigImage;
  decltype(&cuptiProfilerHostEvaluateToGpuValues) HostEvaluateToGpuValues;
  decltype(&cuptiRangeProfilerEnable) Enable;
  decltype(&cuptiRangeProfilerDisable) Disable;
  decltype(&cuptiRangeProfilerGetCounterDataSize) GetCounterDataSize;
  decltype(&cuptiRangeProfilerCounterDataImageInitialize) CounterDataImageInitialize;
  decltype(&cuptiRangeProfilerSetConfig) SetConfig;
  decltype(&cuptiRangeProfilerStart) Start;
  decltype(&cuptiRangeProfilerStop) Stop;
  decltype(&cuptiRangeProfilerPushRange) PushRange;
  decltype(&cuptiRangeProfilerPopRange) PopRange;
  decltype(&cuptiRangeProfilerDecodeData) DecodeData;
  decltype(&cuptiRangeProfilerGetCounterDataInfo) GetCounterDataInfo;
};

template <typename F>
bool Bind(void* library, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(library, name));
  if (fn == nullptr) missing = name;
  return fn != nullptr;
}

absl::StatusOr<CuptiApi> LoadCupti(const std::string& path) {
  // Never closed: CUPTI keeps state for the life of the process.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrCat("the CUPTI library ", path, " could not be loaded (",
                                               why ? why : "dlopen failed",
                                               "); it ships with the CUDA toolkit"));
  }
  CuptiApi api;
  std::string missing;
  const bool bound =
      Bind(lib, "cuptiGetResultString", api.GetResultString, missing) &&
      Bind(lib, "cuptiProfilerInitialize", api.ProfilerInitialize, missing) &&
      Bind(lib, "cuptiDeviceGetChipName", api.DeviceGetChipName, missing) &&
      Bind(lib, "cuptiProfilerGetCounterAvailability", api.GetCounterAvailability, missing) &&
      Bind(lib, "cuptiProfilerHostInitialize", api.HostInitialize, missing) &&
      Bind(lib, "cuptiProfilerHostGetMetricProperties", api.HostGetMetricProperties, missing) &&
      Bind(lib, "cuptiProfilerHostConfigAddMetrics", api.HostConfigAddMetrics, missing) &&
      Bind(lib, "cuptiProfilerHostGetConfigImageSize", api.HostGetConfigImageSize, missing) &&
      Bind(lib, "cuptiProfilerHostGetConfigImage", api.HostGetConfigImage, missing) &&
      Bind(lib, "cuptiProfilerHostEvaluateToGpuValues", api.HostEvaluateToGpuValues, missing) &&
      Bind(lib, "cuptiRangeProfilerEnable", api.Enable, missing) &&
      Bind(lib, "cuptiRangeProfilerDisable", api.Disable, missing) &&
      Bind(lib, "cuptiRangeProfilerGetCounterDataSize", api.GetCounterDataSize, missing) &&
      Bind(lib, "cuptiRangeProfilerCounterDataImageInitialize", api.CounterDataImageInitialize,
           missing) &&
      Bind(lib, "cuptiRangeProfilerSetConfig", api.SetConfig, missing) &&
      Bind(lib, "cuptiRangeProfilerStart", api.Start, missing) &&
      Bind(lib, "cuptiRangeProfilerStop", api.Stop, missing) &&
      Bind(lib, "cuptiRangeProfilerPushRange", api.PushRange, missing) &&
      Bind(lib, "cuptiRangeProfilerPopRange", api.PopRange, missing) &&
      Bind(lib, "cuptiRangeProfilerDecodeData", api.DecodeData, missing) &&
      Bind(lib, "cuptiRangeProfilerGetCounterDataInfo", api.GetCounterDataInfo, missing);
  if (!bound) {
    return absl::UnavailableError(absl::StrCat(
        path, " has no ", missing, ": the range profiler needs CUPTI from CUDA 12.6 or later"));
  }
  return api;
}

// A CUPTI parameter struct: zeroed, with its size set (CUPTI checks it).
template <typename P>
P Params(size_t struct_size) {
  P p{};
  p.structSize = struct_size;
  return p;
}

// The process's current context, through the runtime (the server links no
// driver library of its own).
absl::StatusOr<CUcontext> CurrentContext() {
  using GetCurrent = CUresult (*)(CUcontext*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    return absl::UnavailableError("cuCtxGetCurrent is not available from the driver");
  }
  CUcontext ctx = nullptr;
  if (reinterpret_cast<GetCurrent>(fn)(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return absl::UnavailableError("no current CUDA context to profile");
  }
  return ctx;
}

// A metric set's configuration for one chip: CUPTI's host object (which
// evaluates the values later), the config image, and which metrics the
// chip has.
struct Configuration {
  CUpti_Profiler_Host_Object* host = nullptr;
  std::vector<uint8_t> image;
  std::vector<const char*> supported;  // names, pointing into `names`
  std::vector<bool> has;               // per requested metric
  std::vector<std::string> names;
};

class CuptiReader final : public CounterReader {
 public:
  void Configure(const CuptiOptions& options) {
    absl::MutexLock lock(&mu_);
    if (!used_) options_ = options;
  }

  absl::StatusOr<std::vector<std::optional<double>>> Read(
      absl::Span<const std::string_view> metrics, const CounterReplay& replay) override {
    absl::MutexLock lock(&mu_);
    used_ = true;
    if (!options_.enabled) {
      return absl::UnavailableError("turned off on this server (--profile_counters=false)");
    }
    if (!api_loaded_) {
      api_ = LoadCupti(options_.library);
      api_loaded_ = true;
      if (api_.ok()) {
        auto init =
            Params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
        if (auto s = Check(api_->ProfilerInitialize(&init), "cuptiProfilerInitialize"); !s.ok())
          api_ = s;
      }
    }
    if (!api_.ok()) return api_.status();
    const CuptiApi& api = *api_;

    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) {
      cudaGetLastError();
      return absl::UnavailableError("no current CUDA device");
    }
    auto ctx = CurrentContext();
    if (!ctx.ok()) return ctx.status();
    auto config = ConfigurationFor(device, *ctx, metrics);
    if (!config.ok()) return config.status();

    auto enable =
        Params<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
    enable.ctx = *ctx;
    if (auto s = Check(api.Enable(&enable), "cuptiRangeProfilerEnable"); !s.ok()) return s;
    CUpti_RangeProfiler_Object* profiler = enable.pRangeProfilerObject;
    absl::Cleanup disable = [&] {
      auto p = Params<CUpti_RangeProfiler_Disable_Params>(
          CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
      p.pRangeProfilerObject = profiler;
      api.Disable(&p);
    };

    // One range, one nesting level: the variant's launch (all its kernels).
    auto size = Params<CUpti_RangeProfiler_GetCounterDataSize_Params>(
        CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
    size.pRangeProfilerObject = profiler;
    size.pMetricNames = (*config)->supported.data();
    size.numMetrics = (*config)->supported.size();
    size.maxNumOfRanges = 1;
    size.maxNumRangeTreeNodes = 1;
    if (auto s = Check(api.GetCounterDataSize(&size), "cuptiRangeProfilerGetCounterDataSize");
        !s.ok())
      return s;
    std::vector<uint8_t> data(size.counterDataSize);
    auto init = Params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    init.pRangeProfilerObject = profiler;
    init.counterDataSize = data.size();
    init.pCounterData = data.data();
    if (auto s = Check(api.CounterDataImageInitialize(&init),
                       "cuptiRangeProfilerCounterDataImageInitialize");
        !s.ok())
      return s;
    auto set = Params<CUpti_RangeProfiler_SetConfig_Params>(
        CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
    set.pRangeProfilerObject = profiler;
    set.configSize = (*config)->image.size();
    set.pConfig = (*config)->image.data();
    set.counterDataImageSize = data.size();
    set.pCounterDataImage = data.data();
    set.range = CUPTI_UserRange;
    set.replayMode = CUPTI_UserReplay;
    set.maxRangesPerPass = 1;
    set.numNestingLevels = 1;
    set.minNestingLevel = 1;
    set.passIndex = 0;
    set.targetNestingLevel = 1;
    if (auto s = Check(api.SetConfig(&set), "cuptiRangeProfilerSetConfig"); !s.ok()) return s;

    bool all_passes = false;
    for (int pass = 0; !all_passes; ++pass) {
      if (pass == options_.max_passes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the metrics need more than ", options_.max_passes,
                         " replays (--profile_counter_max_passes)"));
      }
      // Outside the range: what precedes a timed run (the cache flush).
      if (replay.prepare) {
        if (auto s = replay.prepare(); !s.ok()) return s;
      }
      auto start =
          Params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
      start.pRangeProfilerObject = profiler;
      if (auto s = Check(api.Start(&start), "cuptiRangeProfilerStart"); !s.ok()) return s;
      auto push = Params<CUpti_RangeProfiler_PushRange_Params>(
          CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE);
      push.pRangeProfilerObject = profiler;
      push.pRangeName = "variant";
      absl::Status in_range = Check(api.PushRange(&push), "cuptiRangeProfilerPushRange");
      if (in_range.ok()) {
        in_range = replay.launch();
        auto pop = Params<CUpti_RangeProfiler_PopRange_Params>(
            CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE);
        pop.pRangeProfilerObject = profiler;
        absl::Status popped = Check(api.PopRange(&pop), "cuptiRangeProfilerPopRange");
        if (in_range.ok()) in_range = popped;
      }
      auto stop =
          Params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
      stop.pRangeProfilerObject = profiler;
      absl::Status stopped = Check(api.Stop(&stop), "cuptiRangeProfilerStop");
      if (!in_range.ok()) return in_range;
      if (!stopped.ok()) return stopped;
      all_passes = stop.isAllPassSubmitted != 0;
    }

    auto decode = Params<CUpti_RangeProfiler_DecodeData_Params>(
        CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
    decode.pRangeProfilerObject = profiler;
    if (auto s = Check(api.DecodeData(&decode), "cuptiRangeProfilerDecodeData"); !s.ok()) return s;
    auto info = Params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(
        CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
    info.pCounterDataImage = data.data();
    info.counterDataImageSize = data.size();
    if (auto s = Check(api.GetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
        !s.ok())
      return s;
    if (info.numTotalRanges < 1 || decode.numOfRangeDropped > 0) {
      return absl::InternalError(absl::StrCat("CUPTI kept ", info.numTotalRanges,
                                              " ranges and dropped ", decode.numOfRangeDropped,
                                              "; expected the launch's one"));
    }
    std::vector<double> values((*config)->supported.size());
    auto evaluate = Params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
    evaluate.pHostObject = (*config)->host;
    evaluate.pCounterDataImage = data.data();
    evaluate.counterDataImageSize = data.size();
    evaluate.rangeIndex = 0;
    evaluate.ppMetricNames = (*config)->supported.data();
    evaluate.numMetrics = (*config)->supported.size();
    evaluate.pMetricValues = values.data();
    if (auto s =
            Check(api.HostEvaluateToGpuValues(&evaluate), "cuptiProfilerHostEvaluateToGpuValues");
        !s.ok())
      return s;

    std::vector<std::optional<double>> out(metrics.size());
    for (size_t i = 0, next = 0; i < metrics.size(); ++i) {
      if ((*config)->has[i]) out[i] = values[next++];
    }
    return out;
  }

 private:
  // A CUPTI result as a status naming the call; missing privileges are
  // PERMISSION_DENIED, the rest say the profiler is unavailable.
  absl::Status Check(CUptiResult result, const char* call) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (result == CUPTI_SUCCESS) return absl::OkStatus();
    const char* text = nullptr;
    if (api_.ok() && api_->GetResultString != nullptr) api_->GetResultString(result, &text);
    const std::string message = text != nullptr ? absl::StrCat(call, ": ", text)
                                                : absl::StrCat(call, ": CUPTI error ", int(result));
    if (result == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES) {
      return absl::PermissionDeniedError(
          absl::StrCat("this process may not read GPU performance counters "
                       "(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES from ",
                       message, ")"));
    }
    return absl::UnavailableError(message);
  }

  // The configuration of `metrics` on `device`'s chip, made once and kept:
  // the host object and config image depend on the chip and metrics only.
  absl::StatusOr<Configuration*> ConfigurationFor(int device, CUcontext ctx,
                                                  absl::Span<const std::string_view> metrics)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const CuptiApi& api = *api_;
    auto chip =
        Params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
    chip.deviceIndex = size_t(device);
    if (auto s = Check(api.DeviceGetChipName(&chip), "cuptiDeviceGetChipName"); !s.ok()) return s;
    std::string key = chip.pChipName;
    for (std::string_view m : metrics) key.append("|").append(m);
    if (auto it = configurations_.find(key); it != configurations_.end()) return it->second.get();

    auto avail = Params<CUpti_Profiler_GetCounterAvailability_Params>(
        CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
    avail.ctx = ctx;
    if (auto s = Check(api.GetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");
        !s.ok())
      return s;
    std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = availability.data();
    if (auto s = Check(api.GetCounterAvailability(&avail), "cuptiProfilerGetCounterAvailability");
        !s.ok())
      return s;

    auto config = std::make_unique<Configuration>();
    auto host = Params<CUpti_Profiler_Host_Initialize_Params>(
        CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    host.pChipName = chip.pChipName;
    host.pCounterAvailabilityImage = availability.data();
    if (auto s = Check(api.HostInitialize(&host), "cuptiProfilerHostInitialize"); !s.ok()) return s;
    config->host = host.pHostObject;  // kept for the process, as the configuration is

    config->names.assign(metrics.begin(), metrics.end());
    for (const std::string& name : config->names) {
      auto props = Params<CUpti_Profiler_Host_GetMetricProperties_Params>(
          CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE);
      props.pHostObject = config->host;
      props.pMetricName = name.c_str();
      const bool has = api.HostGetMetricProperties(&props) == CUPTI_SUCCESS;
      config->has.push_back(has);
      if (has) config->supported.push_back(name.c_str());
    }
    if (config->supported.empty()) {
      return absl::UnavailableError(
          absl::StrCat("chip ", chip.pChipName, " has none of the metrics"));
    }
    auto add = Params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(
        CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
    add.pHostObject = config->host;
    add.ppMetricNames = config->supported.data();
    add.numMetrics = config->supported.size();
    if (auto s = Check(api.HostConfigAddMetrics(&add), "cuptiProfilerHostConfigAddMetrics");
        !s.ok())
      return s;
    auto image_size = Params<CUpti_Profiler_Host_GetConfigImageSize_Params>(
        CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
    image_size.pHostObject = config->host;
    if (auto s =
            Check(api.HostGetConfigImageSize(&image_size), "cuptiProfilerHostGetConfigImageSize");
        !s.ok())
      return s;
    config->image.resize(image_size.configImageSize);
    auto image = Params<CUpti_Profiler_Host_GetConfigImage_Params>(
        CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
    image.pHostObject = config->host;
    image.configImageSize = config->image.size();
    image.pConfigImage = config->image.data();
    if (auto s = Check(api.HostGetConfigImage(&image), "cuptiProfilerHostGetConfigImage"); !s.ok())
      return s;
    Configuration* kept = config.get();
    configurations_.emplace(key, std::move(config));
    return kept;
  }

  absl::Mutex mu_;
  CuptiOptions options_ ABSL_GUARDED_BY(mu_);
  bool used_ ABSL_GUARDED_BY(mu_) = false;
  bool api_loaded_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<CuptiApi> api_ ABSL_GUARDED_BY(mu_) = absl::UnavailableError("not loaded");
  std::map<std::string, std::unique_ptr<Configuration>> configurations_ ABSL_GUARDED_BY(mu_);
};

CuptiReader& Reader() {
  static auto* reader = new CuptiReader();  // lives as long as CUPTI's state
  return *reader;
}

}  // namespace

void ConfigureCuptiCounters(const CuptiOptions& options) { Reader().Configure(options); }

CounterReader& CuptiCounters() { return Reader(); }

}  // namespace gpucompute::server::cuda
