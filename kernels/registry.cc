#include "gpucompute/kernels/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace gpucompute::kernels {

bool Variant::Supports(DType dtype) const {
  return std::find(dtypes.begin(), dtypes.end(), dtype) != dtypes.end();
}

absl::Status Registry::Add(Variant variant) {
  if (Find(variant.op, variant.backend, variant.name) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("variant ", OpName(variant.op), "/", variant.name, " registered twice"));
  }
  if (variant.name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", OpName(variant.op), " variant has no name"));
  }
  if (variant.dtypes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("variant ", OpName(variant.op), "/", variant.name, " has no element type"));
  }
  if (!variant.launch) {
    return absl::InvalidArgumentError(
        absl::StrCat("variant ", OpName(variant.op), "/", variant.name, " has no launcher"));
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

const Variant* Registry::WithRole(Op op, Backend backend, VariantRole role) const {
  for (const Variant& v : variants_) {
    if (v.op == op && v.backend == backend && v.role == role) return &v;
  }
  return nullptr;
}

namespace {

struct LoadedRegistry {
  Registry registry;
  absl::Status status;
};

const LoadedRegistry& Loaded() {
  static const LoadedRegistry* loaded = [] {
    auto* l = new LoadedRegistry;
    l->status = RegisterCpuVariants(l->registry);
    if (l->status.ok()) l->status = RegisterCudaVariants(l->registry);
    return l;
  }();
  return *loaded;
}

}  // namespace

absl::StatusOr<const Registry*> LoadDefaultRegistry() {
  const LoadedRegistry& loaded = Loaded();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.registry;
}

const Registry& DefaultRegistry() {
  const LoadedRegistry& loaded = Loaded();
  if (!loaded.status.ok()) {
    std::fprintf(stderr, "gpucompute: variant registration failed: %s\n",
                 std::string(loaded.status.message()).c_str());
    std::abort();
  }
  return loaded.registry;
}

}  // namespace gpucompute::kernels
