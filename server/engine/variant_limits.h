// Shapes a kernel variant's launcher cannot take, as kernels/cuda's
// launchers refuse them. Within the sizes ops accept (at most 2^31 - 1
// elements a matrix), only the 2-D MatMul kernels have a limit: their row
// blocks lie on grid.y, which holds at most 65535 blocks, so m is bounded by
// 65535 times the rows a block computes. "auto" never picks a variant that
// cannot take the shape, and a request naming one is refused saying so.
#pragma once

#include <string>

#include "gpucompute/kernels/variant.h"

namespace gpucompute::server {

// Why `v` cannot run `p` (naming the variant and the limit), or "" when it can.
std::string ShapeRefusal(const kernels::Variant& v, const kernels::Problem& p);

}  // namespace gpucompute::server
