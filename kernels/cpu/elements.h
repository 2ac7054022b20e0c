// Element access and min/max shared by the CPU variants and the float64
// reference.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpucompute::kernels::cpu {

// Reads and writes elements through a fixed-size memcpy. A payload sits at
// whatever byte offset it has in its gRPC slice (e.g. +10), so a `const
// float*` to it may be misaligned, and dereferencing one is undefined
// behaviour. The memcpy compiles to the same plain load or store (x86 loads
// and stores need no alignment) and the loops vectorize as before; nothing is
// copied when the data is aligned or when it is not.
template <typename T>
struct ElementsIn {
  const unsigned char* bytes;

  explicit ElementsIn(const void* data) : bytes(static_cast<const unsigned char*>(data)) {}
  T operator[](int64_t i) const {
    T v;
    std::memcpy(&v, bytes + i * int64_t(sizeof(T)), sizeof(T));
    return v;
  }
  // The elements from index `i` on.
  ElementsIn From(int64_t i) const { return ElementsIn(bytes + i * int64_t(sizeof(T))); }
};

template <typename T>
struct ElementsOut {
  unsigned char* bytes;

  explicit ElementsOut(void* data) : bytes(static_cast<unsigned char*>(data)) {}
  void Set(int64_t i, T v) const { std::memcpy(bytes + i * int64_t(sizeof(T)), &v, sizeof(T)); }
};

// MIN and MAX propagate NaN as NumPy's min/max do: a NaN in either operand
// gives NaN, whichever side it is on (std::min(a, b) returns `a` when `b` is
// NaN and so depends on the order). Written without a branch: both compares
// feed one select (`a != a` is the NaN test); in the element-wise column
// loops the vectorizer turns it into packed compares and a blend.
inline double NanMin(double a, double b) { return ((a < b) | (a != a)) ? a : b; }
inline double NanMax(double a, double b) { return ((a > b) | (a != a)) ? a : b; }

}  // namespace gpucompute::kernels::cpu
