#include "server/grpc/profile_response.h"

#include <algorithm>

#include "server/engine/roofline.h"

namespace gpucompute::server {

void FillProfileResponse(const kernels::Problem& p, const std::vector<VariantMeasurement>& measured,
                         const DeviceDescription& device, const Ceilings& ceilings,
                         const std::string& selected, v1::ProfileResponse* response) {
  std::vector<v1::VariantProfile> rows;
  for (const VariantMeasurement& m : measured) {
    v1::VariantProfile row;
    row.set_variant(m.variant->name);
    row.set_description(m.variant->description);
    row.set_ok(m.ok && !m.times_us.empty());
    row.set_error(m.error);
    row.set_max_rel_error(m.max_rel_error);
    if (!m.times_us.empty()) {
      std::vector<double> t = m.times_us;
      std::sort(t.begin(), t.end());
      const double median =
          t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
      row.set_median_us(median);
      row.set_min_us(t.front());
      row.set_max_us(t.back());
      row.set_gflops(kernels::UsefulFlops(p) / (median * 1e3));
      row.set_gbytes_per_s(kernels::MinimalBytes(p) / (median * 1e3));
      row.set_fraction_of_roofline(
          RooflineFraction(p, ceilings, median, m.variant->reduced_precision));
    }
    rows.push_back(std::move(row));
  }
  // Fastest correct first; failed variants last, in registry order.
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    if (x.ok() != y.ok()) return x.ok();
    return x.ok() && x.median_us() < y.median_us();
  });
  for (auto& row : rows) *response->add_variants() = std::move(row);
  response->set_selected(selected);
  response->set_device(device.name);
  response->set_peak_gbytes_per_s(ceilings.gbytes_per_s);
  response->set_peak_gflops(ceilings.GFlopsFor(p.dtype));
  response->set_peak_gflops_tf32(ceilings.gflops_tf32);
}

}  // namespace gpucompute::server
