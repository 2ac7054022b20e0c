// 16-bit floats on the host: FP16 (IEEE 754 binary16) and BF16 (the upper
// half of an IEEE float32), held as their bits, with exact widening to float
// and rounding from float to nearest even. The CPU backend, the reference
// checks, the clients' random matrices and the server's random inputs use
// these; kernels use CUDA's own __half and __nv_bfloat16. Header only, C++17.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpucompute::kernels {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float ToFloat(BFloat16 h) { return FloatFromBits(uint32_t(h.bits) << 16); }

// Rounds to nearest even; a NaN stays a NaN (quiet, sign kept).
inline BFloat16 ToBFloat16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t((u + rounding) >> 16)};
}

inline float ToFloat(Float16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1f) return FloatFromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return FloatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = float(mantissa) * (1.0f / 16777216.0f);
  return sign ? -magnitude : magnitude;
}

// Rounds to nearest even (once: no double rounding through an intermediate);
// beyond 65504 (after rounding) gives +-inf, tiny values give subnormals or
// signed zero, a NaN stays a NaN.
inline Float16 ToFloat16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return {uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  if (magnitude >= 0x47800000u) return {uint16_t(sign | 0x7c00u)};  // >= 65536: inf
  if (magnitude >= 0x38800000u) {                                   // normal in FP16
    // Rebias the exponent (127 -> 15) and round the 13 dropped bits; a
    // carry out of the mantissa moves into the exponent, and one out of the
    // largest exponent gives inf, as it should.
    const uint32_t rebased = magnitude - 0x38000000u;
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return {uint16_t(sign | (rounded >> 13))};
  }
  if (magnitude < 0x33000000u) return {sign};  // below half the smallest subnormal: 0
  // Subnormal: the implicit bit made explicit, shifted into place, rounded.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  // The value is mantissa * 2^(exponent - 150); in FP16's subnormal unit,
  // 2^-24, that is mantissa >> (126 - exponent), a shift of 14 to 24.
  const uint32_t shift = 126 - exponent;
  const uint32_t kept = mantissa >> shift;
  const uint32_t dropped = mantissa & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rounded = kept + ((dropped > half || (dropped == half && (kept & 1u))) ? 1 : 0);
  return {uint16_t(sign | rounded)};
}

inline float ToFloat(float f) { return f; }
inline double ToFloat(double f) { return f; }

// Rounds a float to the element type T.
template <typename T>
T FromFloat(float f);
template <>
inline float FromFloat<float>(float f) {
  return f;
}
template <>
inline Float16 FromFloat<Float16>(float f) {
  return ToFloat16(f);
}
template <>
inline BFloat16 FromFloat<BFloat16>(float f) {
  return ToBFloat16(f);
}

}  // namespace gpucompute::kernels
