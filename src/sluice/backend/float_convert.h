// Scalar conversions between f32 and the 16-bit float formats of checkpoints.
#pragma once

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

}  // namespace sluice
