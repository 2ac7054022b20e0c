// How `gpucompute profile` shows a ProfileResponse: the comparisons and notes
// as text under the variants, and the whole Profile as one self-contained
// HTML page (inline CSS and SVG; no scripts, fonts or links to fetch).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "gpucompute/v1/compute.pb.h"

namespace gpucompute::cli {

// The comparisons table: idea, before -> after, time ratio, the counter
// that explains it (before -> after, and whether it moved as predicted),
// lesson. Empty when the response has no comparisons.
std::string ComparisonsText(const v1::ProfileResponse& response);

// The hardware counters: one line per counter (metric, unit) with each
// variant's value in a column, then the counters' meanings. Empty when no
// row has counters.
std::string CountersText(const v1::ProfileResponse& response);

// The rows' notes ("variant  note" lines under a heading); empty when none.
std::string NotesText(const v1::ProfileResponse& response);

// The page: `what` (the op, dtype and shape) as its title, the ladder as
// horizontal bars of median time and of roofline fraction, failed variants,
// the comparisons with their lessons and counters, the counters of every
// variant, notes, the device and its ceilings.
std::string ProfileHtml(const std::string& what, const v1::ProfileResponse& response);

// Writes ProfileHtml to `path`; the error names the file and why.
absl::Status WriteProfileHtml(const std::string& path, const std::string& what,
                              const v1::ProfileResponse& response);

}  // namespace gpucompute::cli
