// The roofline a measured time is judged against: the least time the
// device's ceilings allow for a problem.
#pragma once

#include <string>

#include "server/engine/device.h"

namespace gpucompute::server {

// A fraction of the roofline above this says more about the ceiling than
// about the kernel: the row gets a note (see RooflineVerdict).
inline constexpr double kRooflineSuspectAbove = 1.05;

// Fraction of the roofline bound: the time the device's ceilings allow for
// this problem (max of bytes / bandwidth and flops / peak) over `median_us`.
// Bytes are the problem's minimal bytes read + written (kernels::MinimalBytes),
// the convention the copy ceiling is measured in. An op that only reads
// (reduce) is held to the read-only ceiling when the device measured one.
// Reduced-precision variants are held to the TF32 ceiling when one was measured.
double RooflineFraction(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                        bool reduced_precision = false);

// The fraction and what to know when reading it: empty, or a note that the
// ceiling does not match the access pattern (a reduce on a device with no
// read-only ceiling) and/or that the fraction is above kRooflineSuspectAbove,
// so the ceiling, not the kernel, is in doubt (and why, when the problem's
// bytes fit in the device's last-level cache).
struct RooflineVerdict {
  double fraction = 0;
  std::string note;
};
RooflineVerdict JudgeRoofline(const kernels::Problem& p, const Ceilings& ceilings, double median_us,
                              bool reduced_precision = false);

// The notes JudgeRoofline writes, for tests and clients that look for them.
inline constexpr char kAboveCeilingNote[] =
    "above the measured ceiling: the ceiling was measured while the device was busy, or this "
    "access pattern's ceiling differs";
// Added to kAboveCeilingNote when the problem's bytes fit in the cache.
inline constexpr char kFitsInCacheNote[] =
    "this problem fits in the last-level cache, faster than the memory the ceilings measured";
inline constexpr char kNoReadCeilingNote[] =
    "a reduce only reads; this device measured no read-only ceiling, so its bytes are held to "
    "the copy ceiling (read + write)";

}  // namespace gpucompute::server
