// "auto": which variant runs when the client does not name one. Choices are
// kept per (op, dtype, reduce op and axis, power-of-two shape bucket); a
// bucket is filled from measurements (Profile, calibration) and otherwise
// falls back to a fixed preference order of the fastest known variants.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gpucompute/kernels/registry.h"
#include "server/device.h"

namespace gpucompute::server {

class VariantSelector {
 public:
  VariantSelector(const kernels::Registry& registry, kernels::Backend backend);

  const kernels::Variant* Select(const kernels::Problem& p, bool allow_reduced_precision) const;
  // Remembers the fastest correct variants measured for this problem's bucket.
  void Record(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured);

  // Stable text key of the problem's bucket, e.g. "matmul/float32/m1024/n1024/k1024".
  static std::string BucketKey(const kernels::Problem& p);

 private:
  const kernels::Variant* Preferred(const kernels::Problem& p, bool allow_reduced) const;

  const kernels::Registry& registry_;
  const kernels::Backend backend_;
  mutable absl::Mutex mu_;
  // bucket key + ("exact" | "reduced") -> variant
  std::map<std::string, const kernels::Variant*> chosen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpucompute::server
