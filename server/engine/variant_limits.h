// Shapes a kernel variant's launcher cannot take, as its ladder row declares
// them (kernels::Variant::grid_y_rows: kernels whose row blocks lie on
// grid.y, which holds at most 65535 blocks, bound m by 65535 times the rows
// a block computes). "auto" never picks a variant that cannot take the
// shape, and a request naming one is refused saying so.
#pragma once

#include <string>

#include "gpucompute/kernels/registry.h"

namespace gpucompute::server {

// Why `v` cannot run `p` (naming the variant, the limit, and the variant of
// `registry` to ask for instead), or "" when it can.
std::string ShapeRefusal(const kernels::Registry& registry, const kernels::Variant& v,
                         const kernels::Problem& p);

}  // namespace gpucompute::server
