#include "server/engine/variant_limits.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

// Output rows per thread block of each 2-D CUDA MatMul kernel (naive.cu:
// 32 x 8 threads; tiled.cu: tile x tile; register_tiled.cu: 128 x 128).
struct RowsPerBlock {
  const char* name;
  int64_t rows;
};
constexpr RowsPerBlock kMatMulGrids[] = {
    {"naive", 8}, {"tiled16", 16}, {"tiled32", 32}, {"tiled32_padded", 32}, {"register_tiled", 128},
};
constexpr int64_t kMaxGridY = 65535;

}  // namespace

std::string ShapeRefusal(const kernels::Variant& v, const kernels::Problem& p) {
  if (v.backend != kernels::Backend::kCuda || v.op != kernels::Op::kMatMul) return "";
  for (const RowsPerBlock& g : kMatMulGrids) {
    if (v.name != g.name) continue;
    const int64_t max_m = kMaxGridY * g.rows;
    if (p.m <= max_m) return "";
    return absl::StrCat("variant \"", v.name, "\" takes MatMul with m <= ", max_m, " (", g.rows,
                        " rows a block, at most ", kMaxGridY,
                        " blocks on grid.y); this one has m = ", p.m, ": use cublas or auto");
  }
  return "";
}

}  // namespace gpucompute::server
