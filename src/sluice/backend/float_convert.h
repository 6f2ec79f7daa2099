// Scalar conversions between f32 and the 16-bit float formats of checkpoints.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace sluice
