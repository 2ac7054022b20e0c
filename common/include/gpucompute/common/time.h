// Durations as the server, the clients and the bench report them.
#pragma once

#include <chrono>

namespace gpucompute::common {

// Microseconds since `start` on the steady clock, fraction included (callers
// that report whole microseconds truncate).
inline double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace gpucompute::common
