// Hardware counters on a GPU through CUPTI's range profiler: one user range
// around a variant's launch, replayed by the caller once per pass the
// metrics need, evaluated to Nsight Compute's metric values.
#pragma once

#include <string>

#include "server/engine/hardware_counters.h"

namespace gpucompute::server::cuda {

struct CuptiOptions {
  bool enabled = true;                     // false: rows say counters are turned off
  std::string library = "libcupti.so.13";  // dlopen name or path
  int max_passes = 32;                     // replays of one launch at most
};

// Before the first Profile (the server's flags); later calls are ignored
// once a reader has been used.
void ConfigureCuptiCounters(const CuptiOptions& options);

// The process's CUPTI reader, for the current device on the calling thread.
// Reads are serialized: CUPTI allows one profiling session per context, and
// one at a time per process keeps two Profiles from mixing their ranges.
// The counters count the whole device over the range, so work that other
// requests run at that moment adds to them: an idle server reads exact ones.
CounterReader& CuptiCounters();

}  // namespace gpucompute::server::cuda
