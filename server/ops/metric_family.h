// A metric family built at scrape time rather than held in a registry: the
// name, help line and type, to which the caller adds its samples.
#pragma once

#include <string>
#include <utility>

#include "prometheus/metric_family.h"

namespace gpucompute::server {

inline prometheus::MetricFamily ScrapedFamily(std::string name, std::string help,
                                              prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

}  // namespace gpucompute::server
