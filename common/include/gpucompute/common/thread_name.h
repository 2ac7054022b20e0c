// Names the calling thread as `top -H`, `ps -L`, perf and gdb show it, so
// that a profile per thread says which of the process's threads is which.
#pragma once

#include <string>
#include <string_view>

namespace gpucompute::common {

// The kernel keeps 15 bytes of a name; the rest is cut. Does nothing where
// threads cannot be named.
void NameThisThread(std::string_view name);

// The calling thread's name, or "" where it cannot be read.
std::string ThisThreadName();

}  // namespace gpucompute::common
