#include "server/grpc/profile_response.h"

#include <algorithm>

#include "gpucompute/common/stats.h"
#include "server/engine/lessons.h"
#include "server/engine/roofline.h"

namespace gpucompute::server {
namespace {

void AddNote(v1::VariantProfile& row, const std::string& note) {
  if (note.empty()) return;
  row.set_note(row.note().empty() ? note : row.note() + "; " + note);
}

}  // namespace

std::string CountersUnavailableNote(kernels::Backend backend, bool ran_ok) {
  if (backend == kernels::Backend::kCpu) {
    return "hardware counters need a CUDA device; this server runs the CPU backend";
  }
  return ran_ok ? "hardware counters not read: the device returned none"
                : "hardware counters not read: this variant did not run ok";
}

void FillProfileResponse(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
                         const DeviceDescription& device, const Ceilings& ceilings,
                         const std::string& selected, v1::ProfileResponse* response,
                         bool counters_requested) {
  std::vector<v1::VariantProfile> rows;
  std::vector<TimedVariant> timed;
  for (const VariantMeasurement& m : measured) {
    v1::VariantProfile row;
    row.set_variant(m.variant->name);
    row.set_description(m.variant->description);
    row.set_ok(m.ok && !m.times_us.empty());
    row.set_error(m.error);
    row.set_max_rel_error(m.max_rel_error);
    if (!m.times_us.empty()) {
      const double median = common::Median(m.times_us);
      const auto [fastest, slowest] = std::minmax_element(m.times_us.begin(), m.times_us.end());
      row.set_median_us(median);
      row.set_min_us(*fastest);
      row.set_max_us(*slowest);
      row.set_gflops(kernels::UsefulFlops(p) / (median * 1e3));
      row.set_gbytes_per_s(kernels::MinimalBytes(p) / (median * 1e3));
      const RooflineVerdict verdict =
          JudgeRoofline(p, ceilings, median, m.variant->reduced_precision);
      row.set_fraction_of_roofline(verdict.fraction);
      AddNote(row, verdict.note);
    }
    if (counters_requested) {
      for (const CounterValue& c : m.counters) {
        v1::Counter* counter = row.add_counters();
        counter->set_name(c.metric);
        counter->set_value(c.value);
        counter->set_unit(c.unit);
        counter->set_meaning(c.meaning);
      }
      if (!m.counters_note.empty()) {
        AddNote(row, m.counters_note);
      } else if (m.counters.empty()) {
        AddNote(row, CountersUnavailableNote(device.backend, row.ok()));
      }
    }
    timed.push_back({m.variant, row.ok(), row.median_us(), m.counters});
    rows.push_back(std::move(row));
  }
  // Fastest correct first; failed variants last, in registry order.
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    if (x.ok() != y.ok()) return x.ok();
    return x.ok() && x.median_us() < y.median_us();
  });
  for (auto& row : rows) *response->add_variants() = std::move(row);
  for (const MeasuredLesson& measured_lesson : MeasureLessons(timed)) {
    const kernels::Lesson& lesson = measured_lesson.after->lesson;
    v1::Comparison* c = response->add_comparisons();
    c->set_idea(std::string(lesson.idea));
    c->set_lesson(std::string(lesson.text));
    c->set_before(std::string(lesson.before));
    c->set_after(measured_lesson.after->name);
    c->set_time_ratio(measured_lesson.time_ratio);
    if (measured_lesson.has_counter) {
      c->set_counter(std::string(lesson.counter));
      c->set_counter_before(measured_lesson.counter_before);
      c->set_counter_after(measured_lesson.counter_after);
      c->set_counter_as_predicted(measured_lesson.counter_as_predicted);
    }
  }
  response->set_selected(selected);
  response->set_device(device.name);
  response->set_peak_gbytes_per_s(ceilings.gbytes_per_s);
  response->set_peak_read_gbytes_per_s(ceilings.gbytes_per_s_read);
  response->set_peak_gflops(ceilings.GFlopsFor(p.dtype));
  response->set_peak_gflops_tf32(ceilings.gflops_tf32);
}

}  // namespace gpucompute::server
