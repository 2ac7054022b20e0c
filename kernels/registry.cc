#include "gpucompute/kernels/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpucompute::kernels {

bool Variant::Supports(DType dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

absl::Status Registry::Add(Variant variant) {
  if (Find(variant.op, variant.backend, variant.name) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("variant ", OpName(variant.op), "/",
                                                 variant.name, " registered twice"));
  }
  if (!variant.launch) {
    return absl::InvalidArgumentError(absl::StrCat("variant ", variant.name, " has no launcher"));
  }
  variants_.push_back(std::move(variant));
  return absl::OkStatus();
}

const Variant* Registry::Find(Op op, Backend backend, std::string_view name) const {
  for (const Variant& v : variants_) {
    if (v.op == op && v.backend == backend && v.name == name) return &v;
  }
  return nullptr;
}

std::vector<const Variant*> Registry::List(Op op, Backend backend) const {
  std::vector<const Variant*> out;
  for (const Variant& v : variants_) {
    if (v.op == op && v.backend == backend) out.push_back(&v);
  }
  return out;
}

std::vector<const Variant*> Registry::List(Backend backend) const {
  std::vector<const Variant*> out;
  for (const Variant& v : variants_) {
    if (v.backend == backend) out.push_back(&v);
  }
  return out;
}

const Registry& DefaultRegistry() {
  static const Registry* registry = [] {
    auto* r = new Registry;
    RegisterCpuVariants(*r);
    RegisterCudaVariants(*r);
    return r;
  }();
  return *registry;
}

}  // namespace gpucompute::kernels
