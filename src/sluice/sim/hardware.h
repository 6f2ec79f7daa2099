// HardwareSpec: the ceilings of one accelerator and its links, and the
// efficiency factors that turn ceilings into predicted time. The cost model
// multiplies every ceiling by its factor; later issues calibrate the factors
// against measured kernels (docs/cost-model.md lists where each number comes
// from).
#pragma once

#include <cstdint>
#include <string>

namespace sluice::sim {

struct ModelProfile;

// Fraction of each ceiling a good engine reaches. One struct, so a calibration
// run can replace them together.
struct Efficiency {
  // Dense GEMMs (QKV/O projections, dense MLP, head) vs the peak FLOP/s.
  // cuBLAS alone on Llama-3-8B's shapes at 4096 rows measured 675 TFLOP/s
  // (0.85); kept at 0.70 until the whole engine's prefill is measured (norms,
  // RoPE, activations and launch gaps are not counted apart).
  double gemm_compute = 0.70;
  // Grouped MoE expert GEMMs: fewer rows per expert, so lower than dense.
  double moe_compute = 0.60;
  // Attention math (QK^T, PV, indexer scores) vs the peak FLOP/s
  // (cuDNN causal prefill measured 593-599 of 790 TFLOP/s: 0.75).
  double attention_compute = 0.75;
  // Streaming weights from HBM: cuBLAS GEMV over Llama-3-8B's weights measured
  // 3.63 TB/s (0.845); llama.cpp decode reaches 0.71.
  double weight_bandwidth = 0.85;
  // Reading KV and index keys from HBM (decode attention, cuDNN ~ full speed).
  double kv_bandwidth = 0.85;
  // NVLink collectives (all-reduce, all-to-all) vs the per-direction link rate.
  double nvlink = 0.70;
  // Pinned host<->device copies vs the measured 55 GB/s.
  double host_link = 0.90;
};

// Fixed costs of a step that no roofline sees.
struct StepOverhead {
  double per_step_ms = 0.50;          // scheduling, launch (CUDA graphs), input copies
  // The least time one layer's kernels take however little they move (a
  // forward of many small kernels, not in CUDA graphs: their launches and
  // latencies): a step takes at least layers x this, and no more where its
  // FLOPs and bytes take longer (the floor overlaps them).
  double per_layer_floor_ms = 0.0;
  double per_sequence_ms = 0.005;     // sampling and bookkeeping per sampled sequence
  double per_collective_ms = 0.010;   // NCCL latency of one small collective on NVLink
};

struct HardwareSpec {
  std::string name;
  double peak_bf16_flops_per_s = 0;  // dense, no sparsity
  double peak_fp8_flops_per_s = 0;   // dense; FP4 weights are unpacked to FP8 MMA on SM90
  double hbm_bytes_per_s = 0;
  double hbm_capacity_bytes = 0;     // usable per GPU before --gpu-memory-utilization
  double host_link_bytes_per_s = 0;  // per GPU, each direction
  double nvlink_bytes_per_s = 0;     // per GPU, each direction
  Efficiency efficiency;
  StepOverhead overhead;
  // Query rows the prefill attention kernel computes at once, for each query
  // head: a chunk of fewer rows (a short chunk over a long cached prefix) costs
  // a whole tile against its keys. 1 = no tiling cost (kernels that pack the
  // query heads sharing a KV head into the tile, as FlashMLA does).
  std::int32_t attention_query_tile_rows = 1;
  // A sequence's chunk of at least this many rows runs its attention math at
  // attention_compute_long_chunks instead of efficiency.attention_compute (0:
  // no such split). sluice's CUDA default runs big chunks whole on cuDNN
  // (0.68-0.79 of 790) and short chunks over long prefixes split over keys
  // (0.43-0.64): one efficiency priced prefill-first's 8k-row chunks 30-40%
  // slow in the simulator (S10-lead-4's calibration).
  std::int32_t attention_long_chunk_rows = 0;
  double attention_compute_long_chunks = 0.0;
  // A step confined to some of the SMs (a green-context lane, --decode-lane
  // sms:N): its compute scales with its share of num_sms, its memory traffic
  // with min(1, N x hbm_share_per_sm). 0: the device cannot be split.
  std::int32_t num_sms = 0;
  double hbm_share_per_sm = 0.0;
  // The driver makes an SM group a multiple of this many SMs: sms:N runs on
  // N rounded up.
  std::int32_t sm_group_granularity = 1;
  // The prefill lane's compute beside a decode lane costs this much more per
  // TB/s of the decode lane's HBM traffic (the partition alone costs nothing
  // more, S16-lead-4).
  double prefill_slowdown_per_decode_tb_per_s = 0.0;
};

// NVIDIA H200 SXM: 790 TFLOP/s bf16 (measured, random data), 4.3 TB/s HBM,
// 141 GB, 55 GB/s pinned host copies (measured), NVLink 900 GB/s (450 each way).
HardwareSpec h200();
// h200() with the efficiencies sluice's own CUDA backend measured on it
// (docs/benchmarks.md "CUDA backend", 2026-11-29): what `serve --device cuda`
// sizes prefill chunks with, and what `serve --device sim` predicts. h200()
// keeps the efficiencies a good engine reaches (cuDNN, cuBLAS), for plans.
HardwareSpec h200_sluice_cuda();
// The same H200 running DeepSeek-V4's kernels (the V4-Flash-width forward,
// measured in session 22: docs/cost-model.md "DeepSeek-V4").
HardwareSpec h200_sluice_cuda_deepseek_v4();
// The same H200 running DeepSeek-V3's MLA and FP8 MoE kernels, each factor
// from its kernel's measurement (docs/cost-model.md "DeepSeek-V3's kernels").
HardwareSpec h200_sluice_cuda_deepseek_v3();
// The measured spec for the kernels `profile` runs (the three above).
HardwareSpec sluice_cuda_hardware(const ModelProfile& profile);

// What the CUDA runtime reports about the card a server runs on.
struct DeviceFacts {
  std::string name;
  double hbm_spec_bytes_per_s = 0;  // 2 x peak memory clock x bus width
  double memory_bytes = 0;
  std::int32_t num_sms = 0;
  double sm_clock_hz = 0;  // peak
};

// `spec`, measured on an H200, moved to the card `facts` describes: its HBM
// rate scaled by the two cards' clock-and-bus rates (an H100 SXM's 3.35 TB/s
// against the H200's 4.8 gives 3.0 TB/s, what its copy measures), its FLOP
// peaks by SMs x clock (the same for both SXM cards), capacity and SM count
// as reported; named "CARD, as SPEC scaled to it". The efficiencies stay:
// they are the kernels', and the online correction absorbs what differs. A
// fact not reported (0) keeps the H200's number.
HardwareSpec on_device(HardwareSpec spec, const DeviceFacts& facts);

// An H100 SXM as the runtime reports it: 3.35 TB/s by clock and bus, 80 GB,
// 132 SMs at 1,980 MHz (the cards the device tool lends, S29-S31).
DeviceFacts h100_sxm_facts();

}  // namespace sluice::sim
