// A build without the CUDA toolkit: the registry holds CPU variants only.
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {

absl::Status RegisterCudaVariants(Registry&) { return absl::OkStatus(); }
bool BuiltWithCuda() { return false; }

}  // namespace gpucompute::kernels
