// The set of variants a server can run, enumerated by the service and Profile.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpucompute/kernels/variant.h"

namespace gpucompute::kernels {

class Registry {
 public:
  // Fails on a duplicate (op, backend, name), and on a variant without a
  // name, an element type or a launcher.
  absl::Status Add(Variant variant);

  // Null when no variant of that op, backend and name exists.
  const Variant* Find(Op op, Backend backend, std::string_view name) const;
  // All variants of one op and backend, in registration order (simplest first).
  std::vector<const Variant*> List(Op op, Backend backend) const;
  std::vector<const Variant*> List(Backend backend) const;
  // The variant of that op and backend holding `role`; null when none does.
  const Variant* WithRole(Op op, Backend backend, VariantRole role) const;

 private:
  std::vector<Variant> variants_;
};

// The CPU variants (always available), from the tables in kernels/cpu/.
absl::Status RegisterCpuVariants(Registry& registry);
// The CUDA variants, from the ladder tables in kernels/cuda/<op>/ladder.cc;
// registers nothing in a build without CUDA.
absl::Status RegisterCudaVariants(Registry& registry);
// True when this build includes the CUDA variants.
bool BuiltWithCuda();

// A registry holding every variant this build has, built on the first call;
// the first registration error when a ladder table is broken.
absl::StatusOr<const Registry*> LoadDefaultRegistry();
// LoadDefaultRegistry's registry. A broken table is a programming error: this
// aborts with its message (the server checks LoadDefaultRegistry at start-up).
const Registry& DefaultRegistry();

}  // namespace gpucompute::kernels
