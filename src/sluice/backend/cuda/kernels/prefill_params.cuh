// The parameters every prefill attention kernel takes (mma and both wgmma
// kernels) and the split pieces' workspace layout the merge kernel reads:
// every piece's f32 outputs, then every piece's log2-sum-exp.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "sluice/backend/cuda/kernels/kernels.h"

namespace sluice::cuda {

struct PrefillParams {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  float* partial_out;  // split pieces: [piece, head, kPrefillTileRows, head_dim]
  float* partial_lse;  // split pieces: [piece, head, kPrefillTileRows], log2 domain
  const __nv_bfloat16* k_cache;
  const __nv_bfloat16* v_cache;
  int num_q_heads, num_kv_heads, block_size;
  float scale_log2;
};

inline PrefillParams prefill_params_of(const StepDeviceView& step, const AttentionArgs& args, int head_dim) {
  constexpr float kLog2e = 1.4426950408889634f;
  PrefillParams p{};
  p.q = static_cast<const __nv_bfloat16*>(args.q);
  p.out = static_cast<__nv_bfloat16*>(args.out);
  p.partial_out = static_cast<float*>(args.prefill_split_workspace);
  p.partial_lse = p.partial_out == nullptr
                      ? nullptr
                      : p.partial_out + static_cast<std::int64_t>(step.num_prefill_split_pieces) *
                                            args.num_q_heads * kPrefillTileRows * head_dim;
  p.k_cache = static_cast<const __nv_bfloat16*>(args.k_cache);
  p.v_cache = static_cast<const __nv_bfloat16*>(args.v_cache);
  p.num_q_heads = args.num_q_heads;
  p.num_kv_heads = args.num_kv_heads;
  p.block_size = args.block_size_tokens;
  p.scale_log2 = args.scale * kLog2e;
  return p;
}

}  // namespace sluice::cuda
