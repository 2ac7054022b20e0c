// A build without the CUDA toolkit: the registry holds CPU variants only.
#include "gpucompute/kernels/registry.h"

namespace gpucompute::kernels {

void RegisterCudaVariants(Registry&) {}
bool BuiltWithCuda() { return false; }

}  // namespace gpucompute::kernels
