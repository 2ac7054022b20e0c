// Which variant runs a request: the one place that decides. A request names
// a variant, or asks for "auto" (or names none). A named variant must be one
// of the backend's ladder for the op and take the element type and the shape
// (its grid's limits, kernels::Variant::grid_y_rows). "auto" runs what
// measurements found fastest for the shape's bucket (Profile, calibration),
// else the variant the ladder ranks first (fallback_rank); never a
// reduced-precision variant unless the request allows it, never one that
// cannot take the shape. Choices are kept per (op, dtype, reduce op and
// axis, power-of-two shape bucket, where the request is served from).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gpucompute/kernels/registry.h"
#include "server/engine/device.h"

namespace gpucompute::server {

// The name that asks the server to choose (as does no name).
inline constexpr std::string_view kAutoVariant = "auto";

// Where a request's matrices are while its kernel runs, as far as `auto`
// tells its choices apart. On an H200 the fastest 64^3 MatMul kernel on
// device memory (`tiled16`) serves 0.77 of the rate of the fastest one
// reading its operands across the bus (`register_tiled`), so a server that
// calibrates as served (--calibrate_as_served) keeps the two apart, and a
// Profile (kernels timed alone) never overrides a choice timed as served.
// Otherwise every request counts as kDeviceMemory: one choice per bucket.
enum class ServedFrom {
  kDeviceMemory,  // operands held as tensors or copied up; timed as kernels alone
  kHostMemory,    // every matrix travels in the call; timed as served from host memory
};

class VariantSelector {
 public:
  VariantSelector(const kernels::Registry& registry, kernels::Backend backend);

  // The variant a request names for `p`; null for "" and "auto" (Choose
  // picks when it runs). A name that is no variant here, or one that cannot
  // take the dtype or the shape, is INVALID_ARGUMENT saying why (without the
  // request field's name); `dtype_name` names element types in the caller's
  // words.
  using DTypeNamer = std::string(kernels::DType);
  absl::StatusOr<const kernels::Variant*> Requested(const kernels::Problem& p,
                                                    std::string_view name,
                                                    DTypeNamer* dtype_name) const;

  // Loads earlier choices from `path` (if it exists) and saves every new
  // measurement there. Unknown variant names in the file are ignored.
  absl::Status UseCacheFile(const std::string& path);

  const kernels::Variant* Select(const kernels::Problem& p, bool allow_reduced_precision,
                                 ServedFrom served_from = ServedFrom::kDeviceMemory) const;

  struct Choice {
    const kernels::Variant* variant = nullptr;
    // True for the one caller that should calibrate this unmeasured bucket
    // (measure `candidates`, then Record); others get the fallback meanwhile.
    bool calibrate = false;
    std::vector<const kernels::Variant*> candidates;
  };
  // Claims and choices are kept apart by `served_from`.
  Choice Choose(const kernels::Problem& p, bool allow_reduced_precision,
                ServedFrom served_from = ServedFrom::kDeviceMemory);
  // Gives up a calibration claim (the measurement failed) so a later request retries.
  void AbandonCalibration(const kernels::Problem& p,
                          ServedFrom served_from = ServedFrom::kDeviceMemory);
  // Remembers the fastest correct variants measured for this problem's
  // bucket, for requests served from `served_from`. Timed as kernels alone, a
  // zero-copy variant within 2 us of the fastest wins (it saves a small
  // request its copies, which a kernel's time does not show); timed as
  // served (VariantMeasurement::timed_as_served), the times hold the copies
  // and the fastest wins.
  void Record(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
              ServedFrom served_from = ServedFrom::kDeviceMemory);

  // Stable text key of the problem's bucket, e.g. "matmul/float32/m1024/n1024/k1024".
  static std::string BucketKey(const kernels::Problem& p);

  // The shape a calibration measures for `p`: each dimension capped at
  // kCalibrationMaxDim. Checking every variant of a 16384^2 request against a
  // float64 reference would hold that first request for seconds; 4096^2
  // (64 MiB of float32 in, 64 MiB out) still dwarfs the L2 cache, so the
  // ranking of bandwidth-bound variants carries over.
  static constexpr int64_t kCalibrationMaxDim = 4096;
  static kernels::Problem CalibrationProblem(const kernels::Problem& p);

 private:
  // What a thread's last Choose answered without a claim, and for what:
  // answered again, while nothing has changed (generation_), with no lock.
  struct LastChoice {
    uint64_t selector = 0;  // id_
    uint64_t generation = 0;
    kernels::Problem problem;
    bool allow_reduced = false;
    ServedFrom served_from = ServedFrom::kDeviceMemory;
    const kernels::Variant* variant = nullptr;
  };

  const kernels::Variant* Preferred(const kernels::Problem& p, bool allow_reduced) const;
  // Choose's answer from the choices and claims (taking mu_).
  Choice ChooseFromTable(const kernels::Problem& p, bool allow_reduced_precision,
                         ServedFrom served_from);
  // Under mu_, after anything that can change what Choose answers: a choice
  // made or loaded, a claim given up.
  void ChoicesChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    generation_.fetch_add(1, std::memory_order_release);
  }

  const kernels::Registry& registry_;
  const kernels::Backend backend_;
  // Numbers this selector, so that a thread's LastChoice is never taken for
  // another's, even one made later at the same address.
  const uint64_t id_;
  std::atomic<uint64_t> generation_{0};
  mutable absl::Mutex mu_;
  void SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a bucket's choice (`slot`: its key and precision) answers for `p`:
  // the chosen variant, or the ladder's preference when the choice does not
  // take this shape; nothing when the bucket has no choice yet.
  std::optional<const kernels::Variant*> ChosenLocked(const std::string& slot,
                                                      const kernels::Problem& p,
                                                      bool allow_reduced) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // bucket key + ("exact" | "reduced") + served from -> variant
  std::map<std::string, const kernels::Variant*> chosen_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> calibrating_ ABSL_GUARDED_BY(mu_);  // bucket key + served from
  std::string cache_path_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server
