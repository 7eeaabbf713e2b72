// The e4m3 format of the FP8 forward (OCP float8_e4m3fn: 4 exponent bits, bias 7, 3 mantissa
// bits, largest finite 448, no infinity, 0x7f / 0xff are NaN) and the one definition of how the
// FP8 scheme rounds and scales (docs/fp8.md). Host and device: the CPU reference, the
// quantization passes and the kernels convert bit for bit alike.
#pragma once

#include <cstdint>
#include <cstring>

#include "gna/core/hd.hpp"

namespace gna {

constexpr float kE4m3Max = 448.f;

namespace fp8_detail {

GNA_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
GNA_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// Integer RNE of a magnitude m shifted right by `shift` (1..31).
GNA_HD uint32_t shift_round_even(uint32_t m, int shift) {
  const uint32_t kept = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

}  // namespace fp8_detail

// fp32 -> e4m3 by round-to-nearest-even, saturating finite values and infinities to +-448
// (cvt.rn.satfinite.e4m3x2.f32); NaN -> 0x7f with the input's sign bit. Portable integer code:
// the reference of the hardware conversion below.
GNA_HD uint8_t e4m3_from_float_portable(float x) {
  const uint32_t u = fp8_detail::float_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t exponent = (u >> 23) & 0xffu;
  const uint32_t mantissa = u & 0x7fffffu;
  if (exponent == 0xffu && mantissa != 0) return static_cast<uint8_t>(sign | 0x7fu);
  const int e8 = static_cast<int>(exponent) - 127 + 7;  // biased e4m3 exponent
  uint32_t code;
  if (e8 > 15) {
    code = 0x7eu;  // beyond 2^8: saturate (infinities too)
  } else if (e8 >= 1) {
    // Normal: 3 mantissa bits kept; a carry steps the exponent (0x7f: rounded past 448).
    code = (static_cast<uint32_t>(e8) << 3) + fp8_detail::shift_round_even(mantissa, 20);
    if (code > 0x7eu) code = 0x7eu;
  } else {
    // Subnormal (steps of 2^-9); 8 steps round up into the smallest normal, code 0x08.
    const int shift = 141 - static_cast<int>(exponent);  // 2^-9 relative to the float's ulp
    code = shift > 31 ? 0u : fp8_detail::shift_round_even(mantissa | 0x800000u, shift);
  }
  return static_cast<uint8_t>(sign | code);
}

// fp32 -> e4m3 as above; the hardware conversion on sm_89 and newer.
GNA_HD uint8_t e4m3_from_float(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.f), "f"(x));
  return static_cast<uint8_t>(pair & 0xffu);
#else
  return e4m3_from_float_portable(x);
#endif
}

// e4m3 -> fp32 (exact).
GNA_HD float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return fp8_detail::bits_float(sign | 0x7fc00000u);
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;  // m * 2^-9
    return sign ? -magnitude : magnitude;
  }
  return fp8_detail::bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

// ---- The FP8 scheme's scalar steps (one definition for the CPU and the GPU) ----

// Quotient by IEEE fp32 division whatever the compiler flags (the GPU's would otherwise be an
// approximation under fast math).
GNA_HD float fp8_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The scale of a group of values whose largest magnitude is amax: amax / 448, so that the
// largest maps to e4m3's largest; 1 where amax is 0 (an all-zero group stays zero).
GNA_HD float e4m3_scale(float amax) { return amax > 0.f ? fp8_div(amax, kE4m3Max) : 1.f; }

// The factor a group's values are encoded at: 448 / amax, the inverse of e4m3_scale (1 where
// amax is 0). Encoding is then one multiply per value: a division per value made the device's
// quantization pass several times slower than its memory traffic.
GNA_HD float e4m3_inverse_scale(float amax) { return amax > 0.f ? fp8_div(kE4m3Max, amax) : 1.f; }

// One value in e4m3 at a group's inverse scale (x * inverse_scale, rounded).
GNA_HD uint8_t e4m3_encode(float x, float inverse_scale) {
  return e4m3_from_float(x * inverse_scale);
}

// The softmax weight p in (0, 1] as the PV product's e4m3 operand: p * 448, rounded (the 1/448
// is folded into the output's normalization, O = acc * v_scale / (448 * l)).
GNA_HD uint8_t e4m3_probability(float p) { return e4m3_from_float(p * kE4m3Max); }

}  // namespace gna
