#include "sluice/backend/cuda/mla_attention.h"

#include <algorithm>
#include <bit>
#include <cstddef>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "sluice/backend/cuda/cuda_check.h"

namespace sluice::cuda {

// Byte offsets into the decode workspace, each section kDeviceAlignBytes-aligned.
struct MlaAttention::DecodeLayout {
  std::int64_t decode_seqs, q_nope, q_latent, partial_out, partial_stats, o_latent, o_decode, total_bytes;
};

MlaAttention::MlaAttention(cudaStream_t stream, LtGemm& gemm) : stream_(stream), gemm_(gemm), batched_gemm_(stream) {}

MlaAttention::DecodeLayout MlaAttention::decode_layout(std::int32_t num_decode, std::int32_t num_splits) const {
  const MlaShape& s = *shape_;
  const std::int64_t items = static_cast<std::int64_t>(num_decode) * s.num_heads;
  const std::int64_t width = s.kv_lora_rank + s.qk_rope_head_dim;
  std::int64_t at = 0;
  auto section = [&](std::int64_t bytes) {
    const std::int64_t begin = at;
    at += align_up(std::max<std::int64_t>(bytes, 1), kDeviceAlignBytes);
    return begin;
  };
  DecodeLayout l{};
  l.decode_seqs = section(num_decode * 4LL);
  l.q_nope = section(items * s.qk_nope_head_dim * 2);
  l.q_latent = section(items * width * 2);
  l.partial_out = section(items * num_splits * s.kv_lora_rank * 4);
  l.partial_stats = section(items * num_splits * 2 * 4);
  l.o_latent = section(items * s.kv_lora_rank * 2);
  l.o_decode = section(items * s.v_head_dim * 2);
  l.total_bytes = at;
  return l;
}

bool MlaAttention::prepare_decode(std::int32_t num_rows, std::int32_t max_context_tokens, std::int32_t num_sms,
                                  MlaKernels kernels) {
  if (!shape_) return false;
  const std::int32_t splits = mla_decode_splits(num_rows, shape_->num_heads, max_context_tokens, num_sms, kernels);
  if (decode_workspace_.ensure(decode_layout(num_rows, splits).total_bytes, stream_)) ++decode_generation_;
  return true;
}

Status MlaAttention::run(const MlaStep& step, const MlaInputs& in, const MlaShape& shape, Tensor out) {
  const std::int64_t heads = shape.num_heads, nope = shape.qk_nope_head_dim, rope = shape.qk_rope_head_dim;
  const std::int64_t v_dim = shape.v_head_dim, rank = shape.kv_lora_rank;
  const std::int64_t qk = nope + rope, width = rank + rope;
  if (step.cache.width != width)
    return Error{fmt::format("CUDA mla_attention: the latent cache holds {} values a position; kv_lora_rank {} + "
                             "qk_rope_head_dim {} needs {}",
                             step.cache.width, rank, rope, width)};
  if (qk > kMlaSimpleMaxQkDim || v_dim > kMlaSimpleMaxVDim || rank > kMlaDecodeMaxRank ||
      width > kMlaDecodeMaxWidth || rope > kRopePartialMaxDim)
    return Error{fmt::format("CUDA mla_attention: dims past the kernels' limits (qk_nope + qk_rope {} <= {}, "
                             "v_head_dim {} <= {}, kv_lora_rank {} <= {})",
                             qk, kMlaSimpleMaxQkDim, v_dim, kMlaSimpleMaxVDim, rank, kMlaDecodeMaxRank)};
  if (nope % 8 != 0 || rope % 8 != 0 || v_dim % 8 != 0 || rank % 8 != 0 || heads <= 0)
    return Error{fmt::format("CUDA mla_attention: qk_nope_head_dim {}, qk_rope_head_dim {}, v_head_dim {} and "
                             "kv_lora_rank {} must be multiples of 8 (16-byte rows)",
                             nope, rope, v_dim, rank)};
  for (const Tensor* t : {&in.q, &in.latent, &in.k_rope, &in.kv_b_proj, static_cast<const Tensor*>(&out)})
    SLUICE_CHECK_MSG(t->dtype == DType::bf16, "CUDA mla_attention takes bf16 tensors");
  const std::int64_t rows = step.view.num_rows;
  SLUICE_CHECK_EQ(in.q.rows(), rows);
  SLUICE_CHECK_EQ(in.q.cols(), heads * qk);
  SLUICE_CHECK_EQ(in.latent.rows(), rows);
  SLUICE_CHECK_EQ(in.latent.cols(), rank);
  SLUICE_CHECK_EQ(in.k_rope.rows(), rows);
  SLUICE_CHECK_EQ(in.k_rope.cols(), rope);
  SLUICE_CHECK_EQ(in.kv_b_proj.rows(), heads * (nope + v_dim));
  SLUICE_CHECK_EQ(in.kv_b_proj.cols(), rank);
  SLUICE_CHECK_EQ(out.rows(), rows);
  SLUICE_CHECK_EQ(out.cols(), heads * v_dim);
  shape_ = shape;

  std::int32_t num_decode = 0;
  for (const SequenceLayout& seq : step.layout.sequences) num_decode += seq.num_rows == 1 ? 1 : 0;
  if (num_decode > 0) {
    // Under a captured or replayed graph prepare_decode has sized it already.
    const std::int32_t splits = mla_decode_splits(num_decode, shape.num_heads, step.view.max_split_kv_tokens,
                                                  step.num_sms, step.kernels);
    if (decode_workspace_.ensure(decode_layout(num_decode, splits).total_bytes, stream_)) ++decode_generation_;
  }
  if (step.replaying) return Ok{};

  launch_latent_write(step.view, in.latent.data, in.k_rope.data, step.cache, step.launch);
  for (std::size_t s = 0; s < step.layout.sequences.size(); ++s) {
    const SequenceLayout& seq = step.layout.sequences[s];
    if (seq.num_rows < 2) continue;
    if (step.cudnn == nullptr || !run_prefill_cudnn(step, seq, static_cast<std::int32_t>(s), in, out))
      run_prefill(step, seq, static_cast<std::int32_t>(s), in, out);
  }
  if (num_decode > 0) run_decode(step, num_decode, in, out);
  return Ok{};
}

bool MlaAttention::for_each_prefill_group(const MlaStep& step, std::int32_t seq_index, std::int64_t context,
                                          std::int64_t group, std::int64_t key_head_bytes, const MlaInputs& in,
                                          const std::function<bool(const PrefillGroup&)>& attend) {
  const MlaShape& s = *shape_;
  const std::int64_t kv_width = s.qk_nope_head_dim + s.v_head_dim;
  const std::int64_t c_bytes = align_up(context * s.kv_lora_rank * 2, kDeviceAlignBytes);
  const std::int64_t rope_bytes = align_up(context * s.qk_rope_head_dim * 2, kDeviceAlignBytes);
  const std::int64_t kv_bytes = align_up(context * group * kv_width * 2, kDeviceAlignBytes);
  const std::int64_t keys_bytes = align_up(context * group * key_head_bytes, kDeviceAlignBytes);
  prefill_workspace_.ensure(c_bytes + rope_bytes + kv_bytes + keys_bytes, stream_);
  auto* base = static_cast<std::byte*>(prefill_workspace_.data());
  void* c = base;
  void* k_rope = base + c_bytes;
  void* kv = base + c_bytes + rope_bytes;
  void* keys = base + c_bytes + rope_bytes + kv_bytes;
  launch_latent_gather(step.view, seq_index, static_cast<std::int32_t>(context), step.cache, c, k_rope, step.launch);
  const auto* w = static_cast<const std::uint16_t*>(in.kv_b_proj.data);
  for (std::int64_t h0 = 0; h0 < s.num_heads; h0 += group) {
    const std::int64_t g = std::min(group, s.num_heads - h0);
    gemm_.run(c, w + h0 * kv_width * s.kv_lora_rank, kv, DType::bf16, context, g * kv_width, s.kv_lora_rank);
    if (!attend({.h0 = h0, .g = g, .kv = kv, .k_rope = k_rope, .keys = keys})) return false;
  }
  return true;
}

void MlaAttention::run_prefill(const MlaStep& step, const SequenceLayout& seq, std::int32_t seq_index,
                               const MlaInputs& in, Tensor out) {
  const MlaShape& s = *shape_;
  const std::int64_t context = static_cast<std::int64_t>(seq.num_computed_tokens) + seq.num_rows;
  const std::int64_t kv_width = s.qk_nope_head_dim + s.v_head_dim;
  const std::int64_t group =
      std::clamp<std::int64_t>(kPrefillKvBudgetBytes / (context * kv_width * 2), 1, s.num_heads);
  for_each_prefill_group(step, seq_index, context, group, /*key_head_bytes=*/0, in, [&](const PrefillGroup& pg) {
    const MlaPrefillArgs args{.q = in.q.data,
                              .kv = pg.kv,
                              .k_rope = pg.k_rope,
                              .out = out.data,
                              .num_heads = s.num_heads,
                              .head_begin = static_cast<std::int32_t>(pg.h0),
                              .group_heads = static_cast<std::int32_t>(pg.g),
                              .nope_dim = s.qk_nope_head_dim,
                              .rope_dim = s.qk_rope_head_dim,
                              .v_dim = s.v_head_dim,
                              .row_begin = seq.row_begin,
                              .num_rows = seq.num_rows,
                              .num_computed = seq.num_computed_tokens,
                              .scale = s.softmax_scale};
    launch_mla_prefill(args, step.kernels, step.launch);
    return true;
  });
}

bool mla_cudnn_prefill_supported(const MlaShape& s, std::int64_t cudnn_version) {
  // QK 192 with V 128 arrived in cuDNN 9.19.
  return cudnn_sdpa_unsupported(1, 1, s.qk_head_dim(), s.v_head_dim, 1).empty() &&
         (s.qk_head_dim() == s.v_head_dim || cudnn_version >= 91900);
}

std::int64_t mla_cudnn_prefill_group(const MlaShape& s, std::int64_t context) {
  const std::int64_t qk = s.qk_head_dim(), kv_width = s.qk_nope_head_dim + s.v_head_dim;
  const auto bucket = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(context, 1))));
  const auto fit = std::clamp<std::int64_t>(kPrefillKvBudgetBytes / (bucket * (kv_width + qk) * 2), 1, s.num_heads);
  return static_cast<std::int64_t>(std::bit_floor(static_cast<std::uint64_t>(fit)));
}

SdpaPacked mla_cudnn_prefill_call(const MlaShape& s, std::int32_t group_heads, std::int32_t num_rows,
                                  std::int32_t num_keys) {
  const std::int64_t qk = s.qk_head_dim(), kv_width = s.qk_nope_head_dim + s.v_head_dim;
  return SdpaPacked{.num_heads = group_heads,
                    .head_dim_qk = static_cast<std::int32_t>(qk),
                    .head_dim_v = s.v_head_dim,
                    .q_row = s.num_heads * qk,
                    .o_row = static_cast<std::int64_t>(s.num_heads) * s.v_head_dim,
                    .k_row = group_heads * qk,
                    .k_head = qk,
                    .v_row = group_heads * kv_width,
                    .v_head = kv_width,
                    .num_rows = num_rows,
                    .num_keys = num_keys,
                    .scale = s.softmax_scale};
}

std::vector<SdpaPacked> mla_cudnn_prefill_classes(const MlaShape& s, std::int32_t max_rows, std::int32_t max_keys) {
  std::vector<SdpaPacked> calls;
  const std::int64_t last_keys = pow2_at_least(max_keys, 64), last_rows = pow2_at_least(max_rows, 64);
  for (std::int64_t keys = 64; keys <= last_keys; keys *= 2) {
    // Contexts of up to 64 keys share the 64 class; their groups may differ.
    for (std::int64_t context = keys == 64 ? 1 : keys; context <= keys; context *= 2) {
      const std::int64_t group = mla_cudnn_prefill_group(s, context);
      for (std::int64_t rows = 64; rows <= std::min(keys, last_rows); rows *= 2)
        for (std::int64_t g : {group, s.num_heads % group})  // the last group may be short
          if (g > 0)
            calls.push_back(mla_cudnn_prefill_call(s, static_cast<std::int32_t>(g), static_cast<std::int32_t>(rows),
                                                   static_cast<std::int32_t>(keys)));
    }
  }
  return calls;
}

bool MlaAttention::run_prefill_cudnn(const MlaStep& step, const SequenceLayout& seq, std::int32_t seq_index,
                                     const MlaInputs& in, Tensor out) {
  const MlaShape& s = *shape_;
  const std::int64_t nope = s.qk_nope_head_dim, rope = s.qk_rope_head_dim, v_dim = s.v_head_dim;
  const std::int64_t qk = nope + rope, kv_width = nope + v_dim;
  // A refusal is remembered (and logged once).
  if (cudnn_refused_ || !mla_cudnn_prefill_supported(s, step.cudnn->version())) return false;
  const std::int64_t context = static_cast<std::int64_t>(seq.num_computed_tokens) + seq.num_rows;
  const std::int64_t group = mla_cudnn_prefill_group(s, context);
  // keys: the group's whole QK heads ([k_nope | k_rope], qk bf16 a head and position).
  return for_each_prefill_group(step, seq_index, context, group, qk * 2, in, [&](const PrefillGroup& pg) {
    const std::int64_t h0 = pg.h0, g = pg.g;
    const auto* kv = static_cast<const std::uint16_t*>(pg.kv);
    launch_mla_concat_k(pg.kv, pg.k_rope, pg.keys, static_cast<std::int32_t>(context), static_cast<std::int32_t>(g),
                        static_cast<std::int32_t>(nope), static_cast<std::int32_t>(rope),
                        static_cast<std::int32_t>(kv_width), step.launch);
    SdpaPacked p = mla_cudnn_prefill_call(s, static_cast<std::int32_t>(g), seq.num_rows,
                                          static_cast<std::int32_t>(context));
    p.q = static_cast<const std::uint16_t*>(in.q.data) + (seq.row_begin * s.num_heads + h0) * qk;
    p.out = static_cast<std::uint16_t*>(out.data) + (seq.row_begin * s.num_heads + h0) * v_dim;
    p.k = pg.keys;
    p.v = kv + nope;
    if (const Status ran = step.cudnn->run_packed(p); !ran.ok()) {
      spdlog::warn("MLA prefill attention cudnn: {}; our kernels run MLA prefill from now on", ran.error_message());
      cudnn_refused_ = true;
      return false;
    }
    return true;
  });
}

void MlaAttention::run_decode(const MlaStep& step, std::int32_t num_decode, const MlaInputs& in, Tensor out) {
  const MlaShape& s = *shape_;
  const std::int64_t heads = s.num_heads, nope = s.qk_nope_head_dim, v_dim = s.v_head_dim;
  const std::int64_t rank = s.kv_lora_rank, width = rank + s.qk_rope_head_dim, kv_width = nope + v_dim;
  const std::int32_t splits =
      mla_decode_splits(num_decode, s.num_heads, step.view.max_split_kv_tokens, step.num_sms, step.kernels);
  const DecodeLayout l = decode_layout(num_decode, splits);
  auto* base = static_cast<std::byte*>(decode_workspace_.data());
  MlaDecodeArgs a{};
  a.decode_seqs = reinterpret_cast<const std::int32_t*>(base + l.decode_seqs);
  a.num_decode = num_decode;
  a.num_heads = s.num_heads;
  a.nope_dim = s.qk_nope_head_dim;
  a.rope_dim = s.qk_rope_head_dim;
  a.v_dim = s.v_head_dim;
  a.kv_lora_rank = s.kv_lora_rank;
  a.q = in.q.data;
  a.q_nope = base + l.q_nope;
  a.q_latent = base + l.q_latent;
  a.cache = step.cache;
  a.num_splits = splits;
  a.partial_out = reinterpret_cast<float*>(base + l.partial_out);
  a.partial_stats = reinterpret_cast<float*>(base + l.partial_stats);
  a.o_latent = base + l.o_latent;
  a.o_decode = base + l.o_decode;
  a.out = out.data;
  a.scale = s.softmax_scale;

  launch_mla_decode_list(step.view, reinterpret_cast<std::int32_t*>(base + l.decode_seqs), step.launch);
  launch_mla_decode_gather_q(step.view, a, step.launch);
  // q_latent[i, h, :rank] = W_UK_h^T q_nope[i, h] for every head: column-major
  // C_h [rank, D] = A_h [rank, nope] (W_UK_h's rows read as columns) . B_h [nope, D].
  const auto* w = static_cast<const std::uint16_t*>(in.kv_b_proj.data);
  batched_gemm_.run({.m = rank,
                     .n = num_decode,
                     .k = nope,
                     .transpose_a = false,
                     .lda = rank,
                     .ldb = heads * nope,
                     .ldc = heads * width,
                     .stride_a = kv_width * rank,
                     .stride_b = nope,
                     .stride_c = width,
                     .batch = s.num_heads},
                    w, a.q_nope, a.q_latent);
  launch_mla_decode_attention(step.view, a, step.kernels, step.launch);
  // o_decode[i, h, :] = W_UV_h o_latent[i, h]: column-major C_h [v, D] =
  // A_h^T (A_h [rank, v], W_UV_h's rows read as columns) . B_h [rank, D].
  batched_gemm_.run({.m = v_dim,
                     .n = num_decode,
                     .k = rank,
                     .transpose_a = true,
                     .lda = rank,
                     .ldb = heads * rank,
                     .ldc = heads * v_dim,
                     .stride_a = kv_width * rank,
                     .stride_b = rank,
                     .stride_c = v_dim,
                     .batch = s.num_heads},
                    w + nope * rank, a.o_latent, const_cast<void*>(a.o_decode));
  launch_mla_decode_scatter_out(step.view, a, step.launch);
}

}  // namespace sluice::cuda
