// The bytes that name one piece of work, for the maps that group or replay
// work by it (batch queues, CUDA graph caches).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "gpucompute/kernels/registry.h"

namespace gpucompute::server {

// The variant (by address: the registry's variants live as long as the
// server, one object each) and the problem exactly (op, dtypes, shape,
// reduce op and axis), then the caller's `more` words, as raw bytes. Built
// for every small request, whether or not it ever batches or replays:
// written out as text, such a key and its hash lookup took 265 ns on the
// development machine; as bytes, 68 ns.
std::string WorkKey(const kernels::Variant* variant, const kernels::Problem& p,
                    std::initializer_list<int64_t> more = {});

// A pointer as a word of a WorkKey.
inline int64_t KeyWord(const void* pointer) {
  return int64_t(reinterpret_cast<uintptr_t>(pointer));
}

}  // namespace gpucompute::server
