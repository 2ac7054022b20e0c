#include "server/engine/variant_selector.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpucompute/common/stats.h"
#include "server/engine/variant_limits.h"

namespace gpucompute::server {
namespace {

// Smallest power of two >= v: shapes in one bucket behave alike.
int64_t Bucket(int64_t v) { return int64_t(std::bit_ceil(uint64_t(std::max<int64_t>(v, 1)))); }

// The choices of device-memory requests keep the key they always had, so
// a choice cache file written before the two were told apart still
// answers them.
std::string WithServedFrom(std::string key, ServedFrom served_from) {
  if (served_from == ServedFrom::kHostMemory) key += "|served_from_host";
  return key;
}

std::string Slot(const std::string& bucket, bool reduced, ServedFrom served_from) {
  return WithServedFrom(bucket + (reduced ? "|reduced" : "|exact"), served_from);
}

// A calibration times kernels alone. A small request run by a variant that
// cannot read and write host memory in place (not Variant::zero_copy) also
// pays a copy up, a copy down and their marks: several microseconds of GPU
// and driver time. On an H200, a server start whose 1x1 Transpose ran
// `cublas` (the stage times showed its copies) served 65k/s at c=64 against
// 89-95k/s on starts that ran a zero-copy kernel; at that size every
// kernel takes a few microseconds. So a zero-copy variant within this much
// of the fastest is chosen instead; on a large problem the margin is noise.
constexpr double kZeroCopyMarginUs = 2.0;

// Every field: what Choose answers may turn on any of them.
static_assert(sizeof(kernels::Problem) == 48, "a field added to Problem must be compared here");
bool SameProblem(const kernels::Problem& a, const kernels::Problem& b) {
  return a.op == b.op && a.dtype == b.dtype && a.m == b.m && a.n == b.n && a.k == b.k &&
         a.reduce_op == b.reduce_op && a.reduce_axis == b.reduce_axis &&
         a.float32_output == b.float32_output;
}

std::atomic<uint64_t> selectors_made{0};

}  // namespace

VariantSelector::VariantSelector(const kernels::Registry& registry, kernels::Backend backend)
    : registry_(registry),
      backend_(backend),
      id_(selectors_made.fetch_add(1, std::memory_order_relaxed) + 1) {}

absl::StatusOr<const kernels::Variant*> VariantSelector::Requested(const kernels::Problem& p,
                                                                   std::string_view name,
                                                                   DTypeNamer* dtype_name) const {
  if (name.empty() || name == kAutoVariant) return nullptr;
  const kernels::Variant* v = registry_.Find(p.op, backend_, name);
  if (v == nullptr) {
    std::vector<std::string> names;
    for (const kernels::Variant* known : registry_.List(p.op, backend_)) {
      names.push_back(known->name);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown ", kernels::OpName(p.op), " variant \"", std::string(name), "\" on the ",
        kernels::BackendName(backend_), " backend; available: ", std::string(kAutoVariant), ", ",
        absl::StrJoin(names, ", ")));
  }
  if (const std::string refusal = ShapeRefusal(registry_, *v, p); !refusal.empty()) {
    return absl::InvalidArgumentError(refusal);
  }
  if (!v->Supports(p.dtype)) {
    std::vector<std::string> dtypes;
    for (kernels::DType d : v->dtypes) dtypes.push_back(dtype_name(d));
    return absl::InvalidArgumentError(
        absl::StrCat("variant \"", std::string(name), "\" does not support ", dtype_name(p.dtype),
                     " (it supports ", absl::StrJoin(dtypes, ", "), ")"));
  }
  return v;
}

std::string VariantSelector::BucketKey(const kernels::Problem& p) {
  std::string key = absl::StrCat(kernels::OpName(p.op), "/", kernels::DTypeName(p.dtype), "/m",
                                 Bucket(p.m), "/n", Bucket(p.n));
  if (p.op == kernels::Op::kMatMul) absl::StrAppend(&key, "/k", Bucket(p.k));
  if (p.op == kernels::Op::kReduce) {
    absl::StrAppend(&key, "/", kernels::ReduceOpName(p.reduce_op), "/",
                    kernels::ReduceAxisName(p.reduce_axis));
  }
  return key;
}

kernels::Problem VariantSelector::CalibrationProblem(const kernels::Problem& p) {
  kernels::Problem capped = p;
  capped.m = std::min(p.m, kCalibrationMaxDim);
  capped.n = std::min(p.n, kCalibrationMaxDim);
  capped.k = std::min(p.k, kCalibrationMaxDim);
  return capped;
}

const kernels::Variant* VariantSelector::Preferred(const kernels::Problem& p,
                                                   bool allow_reduced) const {
  // The ladder's own preference (Variant::fallback_rank), else its first
  // variant that applies.
  const kernels::Variant* ranked = nullptr;
  const kernels::Variant* first = nullptr;
  for (const kernels::Variant* v : registry_.List(p.op, backend_)) {
    if (!v->Supports(p.dtype) || (v->reduced_precision && !allow_reduced)) continue;
    if (!v->TakesShape(p)) continue;
    if (first == nullptr) first = v;
    if (v->fallback_rank > 0 && (ranked == nullptr || v->fallback_rank < ranked->fallback_rank)) {
      ranked = v;
    }
  }
  return ranked != nullptr ? ranked : first;
}

std::optional<const kernels::Variant*> VariantSelector::ChosenLocked(const std::string& slot,
                                                                     const kernels::Problem& p,
                                                                     bool allow_reduced) const {
  auto it = chosen_.find(slot);
  if (it == chosen_.end()) return std::nullopt;
  // A bucket spans shapes up to twice as tall: its choice may not take this one.
  return it->second->TakesShape(p) ? it->second : Preferred(p, allow_reduced);
}

const kernels::Variant* VariantSelector::Select(const kernels::Problem& p,
                                                bool allow_reduced_precision,
                                                ServedFrom served_from) const {
  {
    absl::ReaderMutexLock lock(&mu_);
    const std::string slot = Slot(BucketKey(p), allow_reduced_precision, served_from);
    if (auto v = ChosenLocked(slot, p, allow_reduced_precision)) return *v;
  }
  return Preferred(p, allow_reduced_precision);
}

VariantSelector::Choice VariantSelector::Choose(const kernels::Problem& p,
                                                bool allow_reduced_precision,
                                                ServedFrom served_from) {
  // Each auto call of every thread comes here, and a thread serving one
  // kind of request asks the same again and again: its last answer stands
  // until a choice is made or a claim given up anywhere. Even a shared lock
  // is a write to the lock's cache line, which every thread takes turns on;
  // and a bucket with one candidate (every op on the CPU backend) is never
  // chosen, so each of its calls took the lock exclusively.
  thread_local LastChoice last;
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (last.selector == id_ && last.generation == generation &&
      last.allow_reduced == allow_reduced_precision && last.served_from == served_from &&
      SameProblem(last.problem, p)) {
    Choice choice;
    choice.variant = last.variant;
    return choice;
  }
  Choice choice = ChooseFromTable(p, allow_reduced_precision, served_from);
  if (!choice.calibrate) {
    last = LastChoice{id_, generation, p, allow_reduced_precision, served_from, choice.variant};
  }
  return choice;
}

VariantSelector::Choice VariantSelector::ChooseFromTable(const kernels::Problem& p,
                                                         bool allow_reduced_precision,
                                                         ServedFrom served_from) {
  Choice choice;
  const std::string bucket = BucketKey(p);
  const std::string slot = Slot(bucket, allow_reduced_precision, served_from);
  // A chosen bucket answers every later call: they share the lock to read it.
  {
    absl::ReaderMutexLock lock(&mu_);
    if (auto v = ChosenLocked(slot, p, allow_reduced_precision)) {
      choice.variant = *v;
      return choice;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (auto v = ChosenLocked(slot, p, allow_reduced_precision)) {  // chosen since the look above
      choice.variant = *v;
      return choice;
    }
    for (const kernels::Variant* v : registry_.List(p.op, backend_)) {
      if (v->Supports(p.dtype) && v->TakesShape(p)) choice.candidates.push_back(v);
    }
    // One caller measures a new bucket; a single candidate needs no measuring.
    choice.calibrate = choice.candidates.size() > 1 &&
                       calibrating_.insert(WithServedFrom(bucket, served_from)).second;
  }
  choice.variant = Preferred(p, allow_reduced_precision);
  return choice;
}

void VariantSelector::AbandonCalibration(const kernels::Problem& p, ServedFrom served_from) {
  absl::MutexLock lock(&mu_);
  calibrating_.erase(WithServedFrom(BucketKey(p), served_from));
  ChoicesChangedLocked();
}

absl::Status VariantSelector::UseCacheFile(const std::string& path) {
  absl::MutexLock lock(&mu_);
  cache_path_ = path;
  std::ifstream in(path);
  if (!in) return absl::OkStatus();  // first run: created on the first save
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    const std::string slot = line.substr(0, tab), name = line.substr(tab + 1);
    const std::string op_name = slot.substr(0, slot.find('/'));
    for (kernels::Op op : {kernels::Op::kMatMul, kernels::Op::kTranspose, kernels::Op::kReduce}) {
      if (op_name != kernels::OpName(op)) continue;
      if (const kernels::Variant* v = registry_.Find(op, backend_, name)) chosen_[slot] = v;
    }
  }
  ChoicesChangedLocked();
  return absl::OkStatus();
}

void VariantSelector::SaveLocked() {
  if (cache_path_.empty()) return;
  const std::string tmp = cache_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [slot, v] : chosen_) out << slot << '\t' << v->name << '\n';
    if (!out) return;
  }
  std::rename(tmp.c_str(), cache_path_.c_str());  // readers never see a half-written file
}

void VariantSelector::Record(const kernels::Problem& p,
                             const std::vector<VariantMeasurement>& measured,
                             ServedFrom served_from) {
  const std::string bucket = BucketKey(p);
  for (bool reduced : {false, true}) {
    const VariantMeasurement* best = nullptr;
    const VariantMeasurement* best_zero_copy = nullptr;
    auto faster = [](const VariantMeasurement& m, const VariantMeasurement* than) {
      return than == nullptr || common::Median(m.times_us) < common::Median(than->times_us);
    };
    for (const VariantMeasurement& m : measured) {
      if (!m.ok || m.times_us.empty() || (m.variant->reduced_precision && !reduced)) continue;
      if (faster(m, best)) best = &m;
      if (m.variant->zero_copy && faster(m, best_zero_copy)) best_zero_copy = &m;
    }
    if (best_zero_copy != nullptr && !best->timed_as_served &&
        common::Median(best_zero_copy->times_us) <=
            common::Median(best->times_us) + kZeroCopyMarginUs) {
      best = best_zero_copy;
    }
    if (best != nullptr) {
      absl::MutexLock lock(&mu_);
      chosen_[Slot(bucket, reduced, served_from)] = best->variant;
    }
  }
  absl::MutexLock lock(&mu_);
  calibrating_.erase(WithServedFrom(bucket, served_from));
  ChoicesChangedLocked();
  SaveLocked();
}

}  // namespace gpucompute::server
