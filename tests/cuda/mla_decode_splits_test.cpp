// How mla_decode_splits cuts a decode row's keys for the wgmma-era kernels
// (kernels/mla_decode.cu): by wgmma_decode_splits' cost over each kernel's
// own tiles, 64 keys for wgmma's, 32 for the 16-head kernels' (the pairs
// form over two blocks an SM). Those take only rows of at most 16 heads:
// above that the pricing is wgmma's, as their launch falls back to wgmma's
// kernel. Host logic only: runs in CI without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/mla_kernels.h"

namespace sluice::cuda {
namespace {

constexpr std::int32_t kSms = 132;  // an H100's or H200's

TEST(MlaDecodeSplits, SixteenHeadsFillOneWaveUnderEitherKernel) {
  // 64 rows x 8k at 16 heads: 64 blocks a split, so 2 splits make one wave of 128.
  EXPECT_EQ(mla_decode_splits(64, 16, 8192, kSms, MlaKernels::wgmma), 2);
  EXPECT_EQ(mla_decode_splits(64, 16, 8192, kSms, MlaKernels::mma_16_heads), 2);
  // One row of 32k: as many splits as the cap allows (128 blocks of 512 keys).
  EXPECT_EQ(mla_decode_splits(1, 16, 32768, kSms, MlaKernels::mma_16_heads), 64);
}

TEST(MlaDecodeSplits, ThePairsFormFillsTwoBlocksAnSm) {
  // 64 rows x 8k: 4 splits make one wave of 256 blocks on 264 slots; 5 would take two.
  EXPECT_EQ(mla_decode_splits(64, 16, 8192, kSms, MlaKernels::mma_16_heads_pairs), 4);
  // 16 rows x 8k: 16 splits (256 blocks of 512 keys) against 8 for one block an SM.
  EXPECT_EQ(mla_decode_splits(16, 16, 8192, kSms, MlaKernels::mma_16_heads), 8);
  EXPECT_EQ(mla_decode_splits(16, 16, 8192, kSms, MlaKernels::mma_16_heads_pairs), 16);
  // The one-barrier form has the pairs form's shape, and its splits.
  EXPECT_EQ(mla_decode_splits(64, 16, 8192, kSms, MlaKernels::mma_16_heads_one_barrier), 4);
  EXPECT_EQ(mla_decode_splits(16, 16, 8192, kSms, MlaKernels::mma_16_heads_one_barrier), 16);
  // Past 16 heads, wgmma's kernel and its splits.
  EXPECT_EQ(mla_decode_splits(64, 128, 8192, kSms, MlaKernels::mma_16_heads_pairs),
            mla_decode_splits(64, 128, 8192, kSms, MlaKernels::wgmma));
}

TEST(MlaDecodeSplits, TheSixteenHeadKernelPricesItsOwnTiles) {
  // One row of 1,000 keys fills no wave: each kernel cuts it into one-tile
  // splits, 16 of wgmma's 64 keys and 32 of the 16-head kernel's 32.
  EXPECT_EQ(mla_decode_splits(1, 16, 1000, kSms, MlaKernels::wgmma), 16);
  EXPECT_EQ(mla_decode_splits(1, 16, 1000, kSms, MlaKernels::mma_16_heads), 32);
  // Past 16 heads the launch takes wgmma's kernel, and the splits are its.
  for (const std::int32_t context : {1024, 8192, 32768})
    EXPECT_EQ(mla_decode_splits(64, 128, context, kSms, MlaKernels::mma_16_heads),
              mla_decode_splits(64, 128, context, kSms, MlaKernels::wgmma))
        << context;
}

TEST(MlaDecodeSplits, TheWgmmaEraSetsAreNamedOnce) {
  for (const MlaKernels k : {MlaKernels::wgmma, MlaKernels::mma_16_heads, MlaKernels::mma_16_heads_pairs,
                             MlaKernels::mma_16_heads_one_barrier})
    EXPECT_TRUE(mla_decode_wgmma_era(k)) << static_cast<int>(k);
  EXPECT_FALSE(mla_decode_wgmma_era(MlaKernels::simple));
  EXPECT_FALSE(mla_decode_wgmma_era(MlaKernels::tensor_core));
}

}  // namespace
}  // namespace sluice::cuda
