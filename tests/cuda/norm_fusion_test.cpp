// The add_rms_norm taken into the next decode GEMV's prologue
// (DecodeNormFusion::gemv_prologue, kernels/gemv_norm_prologue.cuh) against
// the norm as its own kernel: a Llama layer's decode ops under graphs, two
// Ops over the same weights, cache and inputs. The norm's arithmetic is
// shared (rms_norm_row.cuh), so every output must be the same bits: the
// residual (written by the prologue's last block), both norms' outputs, q,
// k, the attention output and the SwiGLU activations.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>

#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/rope.h"
#include "test_util.h"

namespace sluice {
namespace {

using namespace sluice::testing;

// Bit-equal as floats (both sides come from bf16 or the same f32 math).
void expect_same_bits(const std::vector<float>& fused, const std::vector<float>& separate, const char* what,
                      int step) {
  ASSERT_EQ(fused.size(), separate.size()) << what;
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < fused.size(); ++i)
    if (std::memcmp(&fused[i], &separate[i], sizeof(float)) != 0 && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << what << ", step " << step << ": first at " << first << " (" << fused[first]
                            << " against " << separate[first] << ")";
}

// Steps under graphs (the first captured, the rest replayed at the next
// positions), 1 to 4 rows, hidden 4096 (the GEMV's q|k|v in two parts) and
// small shapes: each step runs norm, q|k|v with RoPE, attention, o_proj,
// norm, gate|up SwiGLU, as LlamaModel::forward does.
TEST(CudaNormFusion, GemvPrologueMatchesTheNormKernel) {
  struct Case {
    std::int32_t num_q_heads, num_kv_heads, head_dim, hidden, inter, rows;
  };
  constexpr std::int32_t kSteps = 4, kBlock = 16;
  constexpr float kEps = 1e-5f;
  const std::int32_t first_positions[4] = {3, 700, 17, 0};
  std::uint64_t seed = 900;
  for (const Case c : {Case{32, 8, 128, 4096, 1024, 1}, Case{32, 8, 128, 4096, 512, 3}, Case{16, 4, 128, 2048, 768, 2},
                       Case{8, 2, 64, 256, 512, 4}}) {
    SCOPED_TRACE(::testing::Message() << "heads " << c.num_q_heads << "/" << c.num_kv_heads << " x " << c.head_dim
                                      << ", hidden " << c.hidden << ", " << c.rows << " rows");
    const std::int64_t q_width = static_cast<std::int64_t>(c.num_q_heads) * c.head_dim;
    const std::int64_t kv_width = static_cast<std::int64_t>(c.num_kv_heads) * c.head_dim;
    const std::int32_t blocks_per_seq = (700 + kSteps) / kBlock + 1;
    const auto w_qkv = random_bf16(static_cast<std::size_t>((q_width + 2 * kv_width) * c.hidden), ++seed, 0.05f);
    const auto w_o = random_bf16(static_cast<std::size_t>(c.hidden * q_width), ++seed, 0.05f);
    const auto w_gate_up = random_bf16(static_cast<std::size_t>(2 * c.inter * c.hidden), ++seed, 0.05f);
    auto norm_weight = [&] {
      auto w = random_bf16(static_cast<std::size_t>(c.hidden), ++seed, 0.5f);
      for (float& v : w) v = round_bf16(v + 1.0f);
      return w;
    };
    const auto w_norm1 = norm_weight(), w_norm2 = norm_weight();
    const auto residual0 = random_bf16(static_cast<std::size_t>(c.rows) * c.hidden, ++seed, 2.0f);
    DeviceArray block_out(random_bf16(static_cast<std::size_t>(c.rows) * c.hidden, ++seed), DType::bf16,
                          {c.rows, c.hidden});
    RopeParams rope{.head_dim = c.head_dim, .theta = 500000.0f, .llama3_factor = 8.0f};
    std::unique_ptr<Ops> ops[2];
    std::unique_ptr<DeviceArray> residual[2];
    std::array<Tensor, 5> weight[2];  // q|k|v, o, gate|up, norm 1, norm 2
    for (int i = 0; i < 2; ++i) {
      CudaOptions options{.scratch_bytes = 256LL << 20, .use_cuda_graphs = true};
      options.decode_norm_fusion = i == 0 ? cuda::DecodeNormFusion::gemv_prologue : cuda::DecodeNormFusion::kernel;
      options.gemv_max_rows = static_cast<std::int32_t>(cuda::kGemvMaxRows);
      auto made = make_cuda_ops(options);
      ASSERT_TRUE(made.ok()) << made.error_message();
      ops[i] = std::move(made).value();
      ASSERT_TRUE(ops[i]->allocate_kv_cache({.num_layers = 1, .num_blocks = c.rows * blocks_per_seq,
                                             .block_size_tokens = kBlock, .num_kv_heads = c.num_kv_heads,
                                             .head_dim = c.head_dim}).ok());
      ASSERT_TRUE(cuda_fill_kv_cache_random(*ops[i], 11).ok());
      const std::array<std::pair<const std::vector<float>*, Shape>, 5> host = {
          {{&w_qkv, Shape{q_width + 2 * kv_width, c.hidden}},
           {&w_o, Shape{c.hidden, q_width}},
           {&w_gate_up, Shape{2 * c.inter, c.hidden}},
           {&w_norm1, Shape{c.hidden}},
           {&w_norm2, Shape{c.hidden}}}};
      for (std::size_t j = 0; j < host.size(); ++j) {
        auto uploaded = ops[i]->upload_weight(Tensor{const_cast<float*>(host[j].first->data()), DType::f32,
                                                     host[j].second});
        ASSERT_TRUE(uploaded.ok()) << uploaded.error_message();
        weight[i][j] = *uploaded;
      }
      residual[i] = std::make_unique<DeviceArray>(residual0, DType::bf16, Shape{c.rows, c.hidden});
    }
    for (std::int32_t step = 0; step < kSteps; ++step) {
      StepLayout layout;
      for (std::int32_t r = 0; r < c.rows; ++r) {
        SequenceLayout seq{.row_begin = r, .num_rows = 1, .num_computed_tokens = first_positions[r] + step,
                           .block_table = {}};
        for (std::int32_t b = 0; b < blocks_per_seq; ++b) seq.block_table.push_back(r * blocks_per_seq + b);
        layout.sequences.push_back(seq);
        layout.token_ids.push_back(0);
        layout.positions.push_back(first_positions[r] + step);
      }
      // A new block output at the address the graphs read.
      sync();
      const auto x_step = random_bf16(static_cast<std::size_t>(c.rows) * c.hidden, ++seed);
      std::vector<std::uint16_t> bits(x_step.size());
      for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(x_step[i]);
      ASSERT_EQ(cudaMemcpy(block_out.tensor().data, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice),
                cudaSuccess);
      settle_default_stream();
      constexpr int kOutputs = 8;
      const char* names[kOutputs] = {"residual", "first norm", "q", "k", "attention", "second norm", "o_proj",
                                     "SwiGLU"};
      std::vector<float> got[2][kOutputs];
      for (int i = 0; i < 2; ++i) {
        Ops& o = *ops[i];
        o.begin_step(layout);
        Tensor normed1 = o.scratch({c.rows, c.hidden}), q = o.scratch({c.rows, q_width}),
               k = o.scratch({c.rows, kv_width}), v = o.scratch({c.rows, kv_width}),
               attn = o.scratch({c.rows, q_width}), o_out = o.scratch({c.rows, c.hidden}),
               normed2 = o.scratch({c.rows, c.hidden}), gate_up = o.scratch({c.rows, 2 * c.inter}),
               act = o.scratch({c.rows, c.inter});
        const Tensor res = residual[i]->tensor();
        const std::array<Tensor, 3> no_bias{};
        o.add_rms_norm(res, block_out.tensor(), weight[i][3], kEps, normed1);
        o.qkv_projection(normed1, weight[i][0], no_bias, q, k, v);
        o.rope(q, k, rope);
        o.attention(0, q, k, v, 1.0f / std::sqrt(static_cast<float>(c.head_dim)), attn);
        o.matmul(attn, weight[i][1], Tensor{}, o_out);
        o.add_rms_norm(res, o_out, weight[i][4], kEps, normed2);
        o.gate_up_silu(normed2, weight[i][2], gate_up, act);
        (void)o.sample(Tensor{nullptr, DType::bf16, Shape{0, 1}}, {});
        const Tensor outputs[kOutputs] = {res, normed1, q, k, attn, normed2, o_out, act};
        for (int t = 0; t < kOutputs; ++t) got[i][t] = download(outputs[t]);
      }
      for (int t = 0; t < kOutputs; ++t) expect_same_bits(got[0][t], got[1][t], names[t], step);
    }
    Result<std::int64_t> fused = cuda_norm_prologue_launches(*ops[0]);
    Result<std::int64_t> separate = cuda_norm_prologue_launches(*ops[1]);
    ASSERT_TRUE(fused.ok() && separate.ok());
    // Two a captured step (a step in a new context bucket captures again); replays launch nothing.
    EXPECT_GT(*fused, 0) << "the prologue never ran: the comparison tested nothing";
    EXPECT_EQ(*fused % 2, 0) << "one of a step's two norms ran as its own kernel";
    EXPECT_EQ(*separate, 0);
  }
}

}  // namespace
}  // namespace sluice
