#include "server/engine/variant_limits.h"

#include "absl/strings/str_cat.h"

namespace gpucompute::server {
namespace {

// The op as the proto's rpcs name it.
const char* RpcName(kernels::Op op) {
  switch (op) {
    case kernels::Op::kMatMul: return "MatMul";
    case kernels::Op::kTranspose: return "Transpose";
    case kernels::Op::kReduce: return "Reduce";
  }
  return "?";
}

}  // namespace

std::string ShapeRefusal(const kernels::Registry& registry, const kernels::Variant& v,
                         const kernels::Problem& p) {
  if (v.TakesShape(p)) return "";
  // The vendor's variant, whose grid takes every shape the service accepts.
  const kernels::Variant* vendor =
      registry.WithRole(v.op, v.backend, kernels::VariantRole::kVendorReference);
  return absl::StrCat("variant \"", v.name, "\" takes ", RpcName(v.op), " with m <= ", v.MaxRows(),
                      " (", v.grid_y_rows, " rows a block, at most ", kernels::kMaxGridYBlocks,
                      " blocks on grid.y); this one has m = ", p.m, ": use ",
                      vendor != nullptr ? vendor->name + " or " : "", "auto");
}

}  // namespace gpucompute::server
