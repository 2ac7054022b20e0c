// Hardware counters a Profile reads per variant: the table of counters (the
// profiler's metric names, units, one-line meanings), the interface a
// backend's profiler implements (CUPTI on a GPU, a fake in tests), and the
// step that turns a reading, or the reason there is none, into a row's
// counters and note.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::server {

struct CounterSpec {
  std::string_view metric;         // Nsight Compute / perfworks metric name
  std::string_view unit;           // e.g. "count", "bytes", "%"
  std::string_view meaning;        // one line
  bool tensor_cores_only = false;  // read only for variants that use tensor cores
};

// Every counter a Profile can report, in the order rows show them.
absl::Span<const CounterSpec> ProfileCounters();
const CounterSpec* FindCounter(std::string_view metric);

// The metrics to read for `variant` running `p`: the tensor-pipe counter
// where tensor cores may run (reduced-precision variants, and every MatMul
// of 16-bit inputs, so the SIMT rung before a tensor-core one shows zero).
std::vector<std::string_view> CountersFor(const kernels::Variant& variant,
                                          const kernels::Problem& p);

struct CounterValue {
  std::string metric;
  double value = 0;
  std::string unit;
  std::string meaning;
};

// One replay of a variant under the profiler: `prepare` runs outside the
// measured range (e.g. flushing the cache, as before each timed run),
// `launch` inside it; the reader waits for the device after each.
struct CounterReplay {
  std::function<absl::Status()> prepare;
  std::function<absl::Status()> launch;
};

// Reads hardware counters over one launch. A profiler may need several
// passes (replays) to read every metric; each pass runs `replay` again. One
// value per metric, in order: nullopt when the device has no such metric.
// PERMISSION_DENIED when the process may not read counters; UNAVAILABLE
// when no profiler can be used here (library missing, turned off).
class CounterReader {
 public:
  virtual ~CounterReader() = default;
  virtual absl::StatusOr<std::vector<std::optional<double>>> Read(
      absl::Span<const std::string_view> metrics, const CounterReplay& replay) = 0;
};

// A variant's counters, or why it has none (`note`, empty when all read).
struct VariantCounters {
  std::vector<CounterValue> values;
  std::string note;
};

// Reads `variant`'s counters with `reader`. A reader's error becomes the
// note (with what grants the permission when that is what is missing);
// only an error of the launch itself is returned.
absl::StatusOr<VariantCounters> ReadVariantCounters(CounterReader& reader,
                                                    const kernels::Variant& variant,
                                                    const kernels::Problem& p,
                                                    const CounterReplay& replay);

// The note of a row whose counters could not be read for `why`.
std::string CountersUnreadNote(const absl::Status& why);

// What grants a process the right to read GPU performance counters.
inline constexpr char kCounterPermissionAdvice[] =
    "run the server as root, in a container with --cap-add SYS_ADMIN, or on a driver loaded "
    "with NVreg_RestrictProfilingToAdminUsers=0 (deploy/README.md)";

}  // namespace gpucompute::server
