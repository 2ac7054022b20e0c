// Element access, widening and rounding, dispatch by dtype and min/max shared
// by the CPU variants and the float64 reference.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "gpucompute/kernels/half.h"
#include "gpucompute/kernels/problem.h"

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
  // The elements from index `i` on.
  ElementsOut From(int64_t i) const { return ElementsOut(bytes + i * int64_t(sizeof(T))); }
};

// An element as double (exact for every dtype) and a double rounded to an
// element type. 16-bit results go through float: the contract's "the FP32
// value rounded once to the output dtype".
inline double Widen(float v) { return v; }
inline double Widen(double v) { return v; }
inline double Widen(Float16 v) { return ToFloat(v); }
inline double Widen(BFloat16 v) { return ToFloat(v); }

template <typename T>
T Narrow(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return FromFloat<T>(static_cast<float>(v));
  }
}

// Calls f(In{}, Out{}) with the host element types of p's inputs and
// output: float, double, Float16 or BFloat16 (whose output may be float).
template <typename F>
decltype(auto) ForElementTypes(const Problem& p, const F& f) {
  switch (p.dtype) {
    case DType::kFloat32: return f(float{}, float{});
    case DType::kFloat64: return f(double{}, double{});
    case DType::kFloat16: return p.float32_output ? f(Float16{}, float{}) : f(Float16{}, Float16{});
    case DType::kBFloat16:
      return p.float32_output ? f(BFloat16{}, float{}) : f(BFloat16{}, BFloat16{});
  }
  std::abort();  // not reached: every case returns
}

// MIN and MAX propagate NaN as NumPy's min/max do: a NaN in either operand
// gives NaN, whichever side it is on (std::min(a, b) returns `a` when `b` is
// NaN and so depends on the order). Written without a branch: both compares
// feed one select (`a != a` is the NaN test); in the element-wise column
// loops the vectorizer turns it into packed compares and a blend.
inline double NanMin(double a, double b) { return ((a < b) | (a != a)) ? a : b; }
inline double NanMax(double a, double b) { return ((a > b) | (a != a)) ? a : b; }

}  // namespace gpucompute::kernels::cpu
