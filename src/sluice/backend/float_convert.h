// Scalar conversions between f32 and the float formats of checkpoints: bf16,
// f16, float8 e4m3, and the OCP microscaling pieces (e8m0 scales, e2m1 codes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "sluice/common/check.h"

namespace sluice {

inline float bf16_to_f32(std::uint16_t bits) {
  const std::uint32_t word = std::uint32_t{bits} << 16;
  float out;
  std::memcpy(&out, &word, 4);
  return out;
}

// Round to nearest even, as torch does.
inline std::uint16_t f32_to_bf16(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, 4);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((word >> 16) | 0x40);  // NaN
  word += 0x7fffu + ((word >> 16) & 1u);
  return static_cast<std::uint16_t>(word >> 16);
}

inline float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x8000u} << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t word;
  if (exponent == 0) {
    if (mantissa == 0) {
      word = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      word = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else {
    word = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &word, 4);
  return out;
}

// float8 e4m3 (OCP E4M3FN): bias 7, subnormals, 0x7f / 0xff are NaN, no infinities.
inline float fp8_e4m3_to_f32(std::uint8_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x80u} << 24;
  const std::uint32_t exponent = (bits >> 3) & 0xfu;
  const std::uint32_t mantissa = bits & 0x7u;
  std::uint32_t word;
  if (exponent == 0xf && mantissa == 0x7) {
    word = sign | 0x7fc00000u;
  } else if (exponent == 0) {
    // Subnormal: mantissa * 2^-9, exact in f32.
    float magnitude = static_cast<float>(mantissa) * (1.0f / 512.0f);
    std::memcpy(&word, &magnitude, 4);
    word |= sign;
  } else {
    word = sign | ((exponent + 127 - 7) << 23) | (mantissa << 20);
  }
  float out;
  std::memcpy(&out, &word, 4);
  return out;
}

// Round to nearest even, saturating to +-448 (what torch's .to(float8_e4m3fn)
// gives for finite inputs within range; out-of-range values are clamped first
// by the quantizer, so saturation only absorbs rounding).
inline std::uint8_t f32_to_fp8_e4m3(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, 4);
  const std::uint8_t sign = static_cast<std::uint8_t>((word >> 24) & 0x80u);
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint8_t>(sign | 0x7f);  // NaN
  const float magnitude = std::fabs(value);
  if (magnitude >= 464.0f) return static_cast<std::uint8_t>(sign | 0x7e);  // 448 and what rounds past it
  if (magnitude < 0.015625f) {  // below the smallest normal, 2^-6: steps of 2^-9
    const auto steps = static_cast<std::uint32_t>(std::nearbyint(magnitude * 512.0f));  // 8 = the smallest normal
    return static_cast<std::uint8_t>(sign | steps);
  }
  int exponent_plus_one = 0;
  std::frexp(magnitude, &exponent_plus_one);  // magnitude = f * 2^e, f in [0.5, 1)
  int exponent = exponent_plus_one - 1;
  // Scaling by powers of two is exact, so nearbyint rounds the true value (ties to even).
  auto mantissa = static_cast<std::uint32_t>(std::nearbyint((std::ldexp(magnitude, -exponent) - 1.0f) * 8.0f));
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int biased = exponent + 7;
  if (biased > 15 || (biased == 15 && mantissa == 7)) return static_cast<std::uint8_t>(sign | 0x7e);
  return static_cast<std::uint8_t>(sign | (static_cast<std::uint32_t>(biased) << 3) | mantissa);
}

// e8m0 (OCP microscaling scale, torch float8_e8m0fnu): 2^(code - 127), no
// sign and no mantissa; 0xff is NaN. Code 0 is 2^-127, an f32 subnormal
// (exact); codes 1..254 are the f32 exponent field itself.
inline float e8m0_to_f32(std::uint8_t code) {
  const std::uint32_t word = code == 0xffu ? 0x7fc00000u : code == 0 ? 0x00400000u : std::uint32_t{code} << 23;
  float out;
  std::memcpy(&out, &word, 4);
  return out;
}

// The e8m0 code of the smallest power of two >= `value` (a positive normal
// f32): the exponent field, plus one when any mantissa bit is set. DeepSeek's
// ue8m0 scale rule, 2^ceil(log2(x)), read off the bits so no log2 rounds.
inline std::uint8_t f32_to_e8m0_ceil(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, 4);
  SLUICE_CHECK_MSG(value > 0.0f && (word >> 23) >= 1 && (word >> 23) < 0xfe,
                   "an e8m0 scale needs a positive normal f32");
  return static_cast<std::uint8_t>((word >> 23) + ((word & 0x7fffffu) != 0 ? 1 : 0));
}

// e2m1 (OCP FP4): sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0
// is subnormal (0 or 0.5). The 16 codes are +-{0, 0.5, 1, 1.5, 2, 3, 4, 6};
// code 8 is -0. No NaN, no infinity.
inline float fp4_e2m1_to_f32(std::uint8_t code) {
  const std::uint32_t exponent = (code >> 1) & 0x3u, mantissa = code & 0x1u;
  const float magnitude = exponent == 0 ? 0.5f * static_cast<float>(mantissa)
                                        : std::ldexp(1.0f + 0.5f * static_cast<float>(mantissa),
                                                     static_cast<int>(exponent) - 1);
  return (code & 0x8u) ? -magnitude : magnitude;
}

// The nearest e2m1 code, ties to the even code (0.25 -> 0, 0.75 -> 1, 1.25 ->
// 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); magnitudes past 6 saturate to
// 6. The sign is kept, -0 included. The caller divides by the group's scale.
inline std::uint8_t f32_to_fp4_e2m1(float value) {
  const float magnitude = std::fabs(value);
  std::uint8_t best = 0;
  for (std::uint8_t code = 1; code < 8; ++code) {
    const float distance = std::fabs(fp4_e2m1_to_f32(code) - magnitude);
    const float best_distance = std::fabs(fp4_e2m1_to_f32(best) - magnitude);
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) best = code;
  }
  return static_cast<std::uint8_t>((std::signbit(value) ? 0x8u : 0u) | best);
}

}  // namespace sluice
