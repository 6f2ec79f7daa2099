// DeepSeek-V4's FP8 latent record (FlashMLA's and vLLM's `fp8_ds_mla` for
// V4; ../shared/models/deepseek-v41-flash.md §3): one window latent or
// compressed entry of head_dim values, the last rope_dim of them roped.
//   bytes [0, nope)                  the nope values as e4m3 codes,
//   bytes [nope, nope + 2 rope)      the rope values as bf16,
//   then one ue8m0 scale a group of 64 nope values, padded to 8 bytes.
// A group's scale is 2^ceil(log2(max(amax, 1e-4) / 448)) (DeepSeek's ue8m0
// rule), its codes e4m3(value / scale), round to nearest even. V4-Flash: 448
// codes + 128 B of rope + 7 scales and a pad = 584 B against bf16's 1024.
// Every decoded value is a bf16 (e4m3 x 2^k), so a sparse attention that reads
// its keys as bf16 reads the record's values exactly.
//
// The host's codec: the CPU tests' emulation of the device
// (tests/support/deepseek_v4_device_rounding.h) and the device kernels' tests
// (launch_v4_quantize_fp8_ds_mla_rows must make these bytes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>

#include "sluice/backend/float_convert.h"
#include "sluice/common/check.h"

namespace sluice {

inline constexpr std::int64_t kFp8DsMlaGroup = 64;       // nope values a scale
inline constexpr float kFp8DsMlaAmaxFloor = 1e-4f;        // a zero group still gets a normal scale
inline constexpr std::int64_t kFp8DsMlaScaleAlign = 8;    // the scales padded to 8 bytes

struct Fp8DsMlaShape {
  std::int64_t head_dim = 0, rope_dim = 0;

  std::int64_t nope() const { return head_dim - rope_dim; }
  std::int64_t groups() const { return nope() / kFp8DsMlaGroup; }
  std::int64_t rope_offset() const { return nope(); }
  std::int64_t scales_offset() const { return nope() + 2 * rope_dim; }
  std::int64_t bytes() const {
    return scales_offset() + (groups() + kFp8DsMlaScaleAlign - 1) / kFp8DsMlaScaleAlign * kFp8DsMlaScaleAlign;
  }
  // The shapes the record takes: whole groups, records 4-byte aligned.
  bool valid() const {
    return rope_dim >= 0 && rope_dim % 2 == 0 && nope() > 0 && nope() % kFp8DsMlaGroup == 0 && bytes() % 4 == 0;
  }
};

// The ue8m0 code of a group of nope values.
inline std::uint8_t fp8_ds_mla_scale_code(std::span<const float> group) {
  float amax = 0.0f;
  for (float v : group) amax = std::max(amax, std::fabs(v));
  return f32_to_e8m0_ceil(std::max(amax, kFp8DsMlaAmaxFloor) / 448.0f);
}

inline void fp8_ds_mla_encode(const Fp8DsMlaShape& shape, std::span<const float> latent,
                              std::span<std::uint8_t> record) {
  SLUICE_CHECK(shape.valid());
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(latent.size()), shape.head_dim);
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(record.size()), shape.bytes());
  std::fill(record.begin(), record.end(), std::uint8_t{0});
  for (std::int64_t g = 0; g < shape.groups(); ++g) {
    const std::span<const float> group = latent.subspan(static_cast<std::size_t>(g * kFp8DsMlaGroup), kFp8DsMlaGroup);
    const std::uint8_t code = fp8_ds_mla_scale_code(group);
    const float scale = e8m0_to_f32(code);
    record[static_cast<std::size_t>(shape.scales_offset() + g)] = code;
    for (std::int64_t i = 0; i < kFp8DsMlaGroup; ++i)
      record[static_cast<std::size_t>(g * kFp8DsMlaGroup + i)] = f32_to_fp8_e4m3(group[static_cast<std::size_t>(i)] / scale);
  }
  for (std::int64_t i = 0; i < shape.rope_dim; ++i) {
    const std::uint16_t bits = f32_to_bf16(latent[static_cast<std::size_t>(shape.nope() + i)]);
    std::memcpy(&record[static_cast<std::size_t>(shape.rope_offset() + 2 * i)], &bits, 2);
  }
}

inline void fp8_ds_mla_decode(const Fp8DsMlaShape& shape, std::span<const std::uint8_t> record,
                              std::span<float> latent) {
  SLUICE_CHECK(shape.valid());
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(latent.size()), shape.head_dim);
  SLUICE_CHECK_EQ(static_cast<std::int64_t>(record.size()), shape.bytes());
  for (std::int64_t c = 0; c < shape.nope(); ++c)
    latent[static_cast<std::size_t>(c)] =
        fp8_e4m3_to_f32(record[static_cast<std::size_t>(c)]) *
        e8m0_to_f32(record[static_cast<std::size_t>(shape.scales_offset() + c / kFp8DsMlaGroup)]);
  for (std::int64_t i = 0; i < shape.rope_dim; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, &record[static_cast<std::size_t>(shape.rope_offset() + 2 * i)], 2);
    latent[static_cast<std::size_t>(shape.nope() + i)] = bf16_to_f32(bits);
  }
}

}  // namespace sluice
