#include "sluice/sim/hardware.h"

#include "sluice/sim/model_profile.h"

namespace sluice::sim {

HardwareSpec h200() {
  HardwareSpec spec;
  spec.name = "H200";
  // cuBLASLt bf16 8192^3 on random data measured 790 TFLOP/s (894 on patterned
  // data, 989 on the datasheet); /work/shared/DEVICE.md.
  spec.peak_bf16_flops_per_s = 790e12;
  // FP8 dense is twice bf16 on the datasheet (1979 vs 989); we keep that ratio
  // on the measured bf16 number.
  spec.peak_fp8_flops_per_s = 2 * 790e12;
  spec.hbm_bytes_per_s = 4.3e12;      // measured copy 4.31 TB/s, datasheet 4.8
  spec.hbm_capacity_bytes = 141e9;    // datasheet 141 GB (nvidia-smi total 143771 MiB)
  spec.host_link_bytes_per_s = 55e9;  // measured pinned copy, each way
  spec.nvlink_bytes_per_s = 450e9;    // NVLink 4: 900 GB/s bidirectional
  spec.num_sms = 132;
  // The 8 chats' decode steps (Llama-3-8B, ~16 GB of weights a step) took a
  // median 16.9 ms on a 16-SM lane beside prefill chunks and 5.2-5.3 ms on
  // every SM (S15-lead-1/3, docs/benchmarks.md): 16 SMs reach 0.31 of what
  // the whole device does. S17-lead-1 (paced lanes): 30.3 ms on 8 SMs, 16.1
  // on 16; the share per SM that fits both within 3.5%.
  spec.hbm_share_per_sm = 0.0206;
  // S16-lead-2: sms:12's decode steps and chunks took what sms:16's did
  // (median 16.6 against 16.5 ms; sms:8's 30.6 ms).
  spec.sm_group_granularity = 8;
  // S16-lead-4 (cuda_bench --overlap 8192): the 8 chats' decode steps back
  // to back on 8, 16 and 32 SMs (about 0.56, 1.03 and 1.67 TB/s of weight
  // reads) slowed an 8,192-row chunk on the other SMs by 5.4%, 10.2% and
  // 18.1%; paced at one step per 50 ms (0.32 TB/s), by 3.0%: about 10% per
  // TB/s. The sim counts the lane's traffic from its own prices (1.27 TB/s
  // for a 16-SM lane back to back) and scales every compute term of the
  // chunk by the SM share, where the chunk alone on 116 SMs took only 1.09x:
  // so the slope is set for the burst's chunks instead, an unpaced 16-SM lane
  // costing them 1.08x (which put the sim within 5% of S16-lead-2's burst).
  // (0.063 per TB/s at the 16-SM share of S16; 0.059 at S17's, the same 1.08x.)
  spec.prefill_slowdown_per_decode_tb_per_s = 0.059;
  return spec;
}

HardwareSpec h200_sluice_cuda() {
  HardwareSpec spec = h200();
  spec.name = "H200 (sluice CUDA kernels as measured)";
  // A 4k prefill, nearly all GEMM, ran at 70% of 790 TFLOP/s overall; the
  // cuBLASLt GEMMs themselves at ~75%.
  spec.efficiency.gemm_compute = 0.75;
  // The default prefill attention (wgmma-ws, S8-3): 364-392 TFLOP/s at 8k/32k
  // causal, 314-366 on 128-2048-row chunks over 100k (cuDNN 593 at 32k);
  // `sluice calibrate` on the S8-5 burst's steps implied 0.49 with the fixed
  // cost below refitted.
  spec.efficiency.attention_compute = 0.44;
  // Decode (session 3): batch 1 at 4k read weights at 75% of HBM; the GQA
  // decode attention of batch 64 x 8k read its KV at 80%.
  spec.efficiency.weight_bandwidth = 0.75;
  spec.efficiency.kv_bandwidth = 0.80;
  // Prefill attention runs 128-row query tiles per head (attention_prefill.cu):
  // on the H200 burst (run S6-1) a 16-row chunk over a 113k-token prefix took
  // as long as a 128-row one, ~38 ms with 8 decodes.
  spec.attention_query_tile_rows = 128;
  // The default prefill attention (auto, session 10) runs chunks whose tiles
  // fill the GPU whole on cuDNN: 477-538 TFLOP/s on 1-2k-row chunks over
  // 32k-131k, 534-621 on whole prompts (S10-lead-1, S9-C2): 0.68 from 1024
  // rows (32 heads: 256 tiles). Shorter chunks keep attention_compute above.
  // Since session 18 cuda's pages hold 64 tokens, where the burst's 8k-row
  // chunks over 16k-100k prefixes ran at 563-621 TFLOP/s against 515-554 in
  // pages of 16 (S18-lead-2): 0.72 (and the sim then within 3% of
  // S18-lead-3's first tokens and burst end, both policies).
  spec.attention_long_chunk_rows = 1024;
  spec.attention_compute_long_chunks = 0.72;
  // The host tier's loads landed at 54.0 GB/s end to end (admission to the
  // step that sees the last block) against the 55.5 GB/s of a plain pinned
  // copy in the same call (S20-5: 64-token pages, 8 MiB copies): 0.97. The
  // 0.90 of h200() came from S7-5's 16-token pages.
  spec.efficiency.host_link = 0.97;
  return spec;
}

HardwareSpec h200_sluice_cuda_deepseek_v4() {
  HardwareSpec spec = h200_sluice_cuda();
  spec.name = "H200 (sluice CUDA kernels on DeepSeek-V4, as measured)";
  // Session 22's V4-Flash-width forward (3 layers: sliding, CSA, HCA; FP8
  // dense linears, FP4 experts held as FP8; deepseek_v4_forward_bench
  // --flash-formats 3 131072 64), split by ncu over the last 8k chunk of a
  // 128k prompt (S22-5, 54.5 ms of kernels), against make_deepseek_v4_profile's
  // FLOPs at h200()'s peaks (FP8 1580 TFLOP/s):
  //  - dense linears 4.4 ms of FP8 FLOPs took 19.0 ms with what runs per
  //    token around them (cuBLASLt 5.2, FP8 quantization 3.4, bf16
  //    conversions 1.4, hc_pre / hc_post 6.3, norms 1.9, rope, copies, the
  //    embedding): 0.23;
  //  - routed and shared experts 4.7 ms took 18.3 ms (the grouped FP8 GEMM
  //    15.3, clamped SwiGLU 1.8, combine 0.9, plan 0.4): 0.26;
  //  - attention 5.26 ms (sparse attention at bf16 peak, the indexer's scan
  //    at FP8 peak) took ~15 ms in session 22 and 12.7 ms in session 23
  //    (S23-6, 50.2 ms of kernels: sparse attention 6.3, the warp-specialised
  //    scores 5.0, the sampled top-k 0.54, compressors and key pools 0.8): 0.41.
  spec.efficiency.gemm_compute = 0.23;
  spec.efficiency.moe_compute = 0.26;
  spec.efficiency.attention_compute = 0.41;
  // A block a query row: no query tile to fill, no long-chunk kernel.
  spec.attention_query_tile_rows = 1;
  spec.attention_long_chunk_rows = 0;
  spec.attention_compute_long_chunks = 0.0;
  // Decode at batch 64 over 128k: 5.75-5.79 ms (S26-1, S26-3; 6.27 in S22-7,
  // before the index keys were stored as e4m3 records) for the 17.9 GB this
  // profile counts (16.6 of touched experts and dense weights, 1.3 of KV):
  // 0.72 of 4.3 TB/s (the bench's 66.7% counts the weights alone).
  spec.efficiency.weight_bandwidth = 0.72;
  spec.efficiency.kv_bandwidth = 0.72;
  // Batch 1 at 128k took 1.60-1.66 ms a step once the bench warmed it up
  // (S23-5, S23-6) for 0.75 ms of weight and KV reads at this bandwidth:
  // ~60 small kernels a layer, not in CUDA graphs, hold a layer to ~0.55 ms.
  spec.overhead.per_step_ms = 0.0;
  spec.overhead.per_layer_floor_ms = 0.55;
  return spec;
}

HardwareSpec h200_sluice_cuda_deepseek_v3() {
  HardwareSpec spec = h200_sluice_cuda();
  spec.name = "H200 (sluice CUDA kernels on DeepSeek-V3, as measured)";
  // Each factor from a kernel of the V3 forward measured on the H200 at full
  // width (128 heads, 256 experts top-8, moe_intermediate 2048; FP8), against
  // make_deepseek_v3_profile's FLOPs and bytes (docs/cost-model.md
  // "DeepSeek-V3's kernels" says which are measured and which assumed):
  //  - the MoE layer at 4,096 tokens, routing, permutation and combine
  //    included, with x quantized into slot order (session 35): 4.45-4.54 ms
  //    on the H200 (S36-1; H100s 4.52-4.85), ~4.50 ms = 642 TFLOP/s: 0.40 of
  //    the 1,580 FP8 peak (S12's kernels: 5.6 ms, 0.33);
  //  - dense FP8 linears with what runs per token around them (activation
  //    quantization, norms, rope, the narrow q_a / kv_a GEMMs): fitted by
  //    `sluice calibrate` on whole-model traces of the truncated V3 (3 dense
  //    + 2 MoE layers): on an H100, this profile scaled to it, 0.544 (S33-2's
  //    burst), 0.541 (S34-1's serve bench), 0.558 (S34-2's burst); on the
  //    H200 0.510 (S36-2's serve bench) and 0.602 (S36-3's burst): 0.55
  //    (cuBLASLt's block-scaled GEMMs alone reach 0.70-0.80, S12);
  //  - decode attention, the absorbed MQA over the latent (the whole op,
  //    eager): 128 heads at batch 64 x 8k, tensor-bound, 1.39-1.55 TB/s of
  //    latent (S26-2/3) = 336-375 TFLOP/s: 0.45 of 790; 16 heads a GPU
  //    (TP8), latent-bound, 2.21-2.34 TB/s: 0.53 of 4.3;
  //  - a chunk of several rows (the decompressed form through cuDNN's SDPA,
  //    the K/V decompression GEMM counted): 8k and 32k prompts 561.7 / 551.0
  //    TFLOP/s (S9-C1): 0.70 of 790;
  //  - decode's weights: the MoE layer at batch 64 read its touched experts
  //    at 3.54-3.64 TB/s (S12): 0.83 of 4.3 (experts are nearly all of a
  //    decode step's weight bytes).
  spec.efficiency.moe_compute = 0.40;
  spec.efficiency.gemm_compute = 0.55;
  spec.efficiency.attention_compute = 0.45;
  spec.efficiency.kv_bandwidth = 0.53;
  spec.attention_long_chunk_rows = 2;
  spec.attention_compute_long_chunks = 0.70;
  spec.efficiency.weight_bandwidth = 0.83;
  return spec;
}

HardwareSpec sluice_cuda_hardware(const ModelProfile& profile) {
  if (profile.deepseek_v4_kernels) return h200_sluice_cuda_deepseek_v4();
  return profile.deepseek_v3_kernels ? h200_sluice_cuda_deepseek_v3() : h200_sluice_cuda();
}

DeviceFacts h100_sxm_facts() {
  return {.name = "H100 SXM", .hbm_spec_bytes_per_s = 3.35e12, .memory_bytes = 80e9, .num_sms = 132,
          .sm_clock_hz = 1.98e9};
}

HardwareSpec on_device(HardwareSpec spec, const DeviceFacts& facts) {
  // The H200 the specs were measured on, as the runtime reports it (cuda_bench's
  // header line: 4.81 TB/s by clock and bus; 132 SMs at 1,980 MHz).
  constexpr double kH200HbmSpec = 4.8e12, kH200SmClockHz = 1.98e9;
  constexpr std::int32_t kH200Sms = 132;
  if (!facts.name.empty()) spec.name = facts.name + ", as " + spec.name + " scaled to it";
  if (facts.hbm_spec_bytes_per_s > 0) spec.hbm_bytes_per_s *= facts.hbm_spec_bytes_per_s / kH200HbmSpec;
  if (facts.memory_bytes > 0) spec.hbm_capacity_bytes = facts.memory_bytes;
  if (facts.num_sms > 0 && facts.sm_clock_hz > 0) {
    const double compute = facts.num_sms * facts.sm_clock_hz / (kH200Sms * kH200SmClockHz);
    spec.peak_bf16_flops_per_s *= compute;
    spec.peak_fp8_flops_per_s *= compute;
  }
  if (facts.num_sms > 0 && spec.num_sms > 0) spec.num_sms = facts.num_sms;
  return spec;
}

}  // namespace sluice::sim
