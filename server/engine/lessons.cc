#include "server/engine/lessons.h"

#include <algorithm>

namespace gpucompute::server {
namespace {

// A counter `before` -> `after` as the idea predicts: a fall (or a rise),
// or both at zero where the idea keeps a count at none.
bool AsPredicted(double before, double after, bool rises) {
  if (before == 0 && after == 0) return true;
  return rises ? after > before : after < before;
}

const CounterValue* FindValue(const std::vector<CounterValue>& values, std::string_view metric) {
  auto it = std::find_if(values.begin(), values.end(),
                         [&](const CounterValue& c) { return c.metric == metric; });
  return it != values.end() ? &*it : nullptr;
}

bool TimedOk(const TimedVariant& t) { return t.variant != nullptr && t.ok && t.median_us > 0; }

}  // namespace

std::vector<MeasuredLesson> MeasureLessons(absl::Span<const TimedVariant> variants) {
  // Teaching order, whatever order the variants were measured in.
  std::vector<const TimedVariant*> teachers;
  for (const TimedVariant& t : variants) {
    if (TimedOk(t) && t.variant->HasLesson()) teachers.push_back(&t);
  }
  std::stable_sort(teachers.begin(), teachers.end(), [](const auto* x, const auto* y) {
    return x->variant->rung < y->variant->rung;
  });
  std::vector<MeasuredLesson> out;
  for (const TimedVariant* after : teachers) {
    const kernels::Variant& v = *after->variant;
    auto before_it = std::find_if(variants.begin(), variants.end(), [&](const TimedVariant& t) {
      return TimedOk(t) && t.variant->op == v.op && t.variant->backend == v.backend &&
             t.variant->name == v.lesson.before;
    });
    if (before_it == variants.end()) continue;
    const TimedVariant& before = *before_it;
    MeasuredLesson m{&v, before.median_us / after->median_us};
    const CounterValue* cb = FindValue(before.counters, v.lesson.counter);
    const CounterValue* ca = FindValue(after->counters, v.lesson.counter);
    if (cb != nullptr && ca != nullptr) {
      m.has_counter = true;
      m.counter_before = cb->value;
      m.counter_after = ca->value;
      m.counter_as_predicted = AsPredicted(cb->value, ca->value, v.lesson.counter_rises);
    }
    out.push_back(m);
  }
  return out;
}

}  // namespace gpucompute::server
