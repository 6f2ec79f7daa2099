// MLA's cuDNN prefill plan classes (mla_attention.h): every chunk a server can
// run within its bounds asks cuDNN only for a class that
// mla_cudnn_prefill_classes lists, so the plans built before serving cover
// the steps (S34-2: 33 of the V3 burst's steps built a plan on their path,
// 64-118 ms each). Host logic only: runs in CI without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "sluice/backend/cuda/cudnn_plan_classes.h"
#include "sluice/backend/cuda/mla_attention.h"
#include "sluice/common/rng.h"

namespace sluice::cuda {
namespace {

// What makes two packed calls one cuDNN plan (cudnn_sdpa.cpp's packed_spec).
using Class = std::tuple<std::int32_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t>;
Class class_of(const SdpaPacked& p) {
  return {p.num_heads, pow2_at_least(p.num_rows, 64), pow2_at_least(p.num_keys, 64),
          p.q_row,     p.o_row,                       p.k_row,
          p.k_head,    p.v_row,                       p.v_head};
}

std::set<Class> listed(const MlaShape& shape, std::int32_t max_rows, std::int32_t max_keys) {
  std::set<Class> out;
  for (const SdpaPacked& p : mla_cudnn_prefill_classes(shape, max_rows, max_keys)) out.insert(class_of(p));
  return out;
}

// The calls run_prefill_cudnn makes for a chunk of `rows` rows ending at
// `context`: one a group of heads, the last group possibly short.
std::vector<SdpaPacked> calls_of(const MlaShape& shape, std::int32_t rows, std::int32_t context) {
  std::vector<SdpaPacked> calls;
  const std::int64_t group = mla_cudnn_prefill_group(shape, context);
  for (std::int64_t h0 = 0; h0 < shape.num_heads; h0 += group)
    calls.push_back(mla_cudnn_prefill_call(shape, static_cast<std::int32_t>(std::min(group, shape.num_heads - h0)),
                                           rows, context));
  return calls;
}

constexpr MlaShape kV3{.num_heads = 128, .qk_nope_head_dim = 128, .qk_rope_head_dim = 64, .v_head_dim = 128,
                       .kv_lora_rank = 512};

TEST(MlaCudnnClasses, DeepSeekV3AtEightKRowsAndThirtyTwoKKeys) {
  const std::set<Class> classes = listed(kV3, 8192, 32768);
  // Keys 64..32768 (10 classes), rows 64..min(keys, 8192): 1+2+...+8, then 8 and 8.
  EXPECT_EQ(classes.size(), 52u);
  // The groups shrink as the keys grow (512 MB of decompressed [k_nope | v] a group).
  EXPECT_EQ(mla_cudnn_prefill_group(kV3, 4096), 128);
  EXPECT_EQ(mla_cudnn_prefill_group(kV3, 8192), 64);
  EXPECT_EQ(mla_cudnn_prefill_group(kV3, 32768), 16);
  EXPECT_EQ(mla_cudnn_prefill_group(kV3, 131072), 4);
}

TEST(MlaCudnnClasses, EveryChunkWithinTheBoundsIsListed) {
  struct Case {
    MlaShape shape;
    std::int32_t max_rows, max_keys;
  };
  // V3, V3 over 8 ranks (16 heads), and a shape whose groups do not divide its heads.
  const MlaShape odd{.num_heads = 3, .qk_nope_head_dim = 32, .qk_rope_head_dim = 16, .v_head_dim = 32,
                     .kv_lora_rank = 64};
  MlaShape tp8 = kV3;
  tp8.num_heads = 16;
  for (const Case& c : {Case{kV3, 8192, 32768}, Case{tp8, 2048, 163840}, Case{kV3, 500, 100000},
                        Case{odd, 256, 1 << 24}}) {
    const std::set<Class> classes = listed(c.shape, c.max_rows, c.max_keys);
    SplitMix64 rng(7);
    int checked = 0;
    auto check = [&](std::int32_t rows, std::int32_t context) {
      for (const SdpaPacked& p : calls_of(c.shape, rows, context)) {
        EXPECT_TRUE(classes.contains(class_of(p)))
            << c.shape.num_heads << " heads, bounds " << c.max_rows << " x " << c.max_keys << ": a chunk of " << rows
            << " rows ending at " << context << " asks for " << p.num_heads << " heads";
        ++checked;
      }
    };
    // The edges (a class's first and last), then random chunks.
    for (std::int32_t context : {2, 63, 64, 65, 128, 129, c.max_keys - 1, c.max_keys})
      for (std::int32_t rows : {2, 64, 65, c.max_rows})
        if (rows <= context) check(rows, context);
    for (int i = 0; i < 2000; ++i) {
      const auto context = static_cast<std::int32_t>(2 + rng.next() % (c.max_keys - 1));
      const auto rows = static_cast<std::int32_t>(2 + rng.next() % (std::min(c.max_rows, context) - 1));
      check(rows, context);
    }
    EXPECT_GT(checked, 2000);
  }
}

}  // namespace
}  // namespace sluice::cuda
