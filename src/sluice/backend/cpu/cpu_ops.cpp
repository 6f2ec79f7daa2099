#include "sluice/backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>
#include <memory>
#include <thread>
#include <vector>

#include "sluice/backend/block_scales.h"
#include "sluice/backend/cpu/cpu_math.h"
#include "sluice/backend/cpu/deepseek_ops.h"
#include "sluice/backend/cpu/deepseek_v4_ops.h"
#include "sluice/backend/cpu/sampler.h"
#include "sluice/backend/cpu/thread_pool.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/rope.h"

namespace sluice {
namespace {

using cpu::dot;
using cpu::to_f32;

// Bump allocator for per-step activations; pointers stay valid until reset().
class ScratchArena {
 public:
  void* allocate(std::size_t bytes) {
    bytes = (bytes + 63) & ~std::size_t{63};
    if (chunks_.empty() || used_ + bytes > chunk_bytes_) {
      chunk_bytes_ = std::max(bytes, std::size_t{16} << 20);
      chunks_.emplace_back(new std::byte[chunk_bytes_]);
      used_ = 0;
    }
    void* out = chunks_.back().get() + used_;
    used_ += bytes;
    total_used_ += bytes;
    return out;
  }
  // Keeps one chunk big enough for the last step's peak.
  void reset() {
    if (chunks_.size() > 1) {
      chunks_.clear();
      chunk_bytes_ = total_used_;
      chunks_.emplace_back(new std::byte[chunk_bytes_]);
    }
    used_ = 0;
    total_used_ = 0;
  }

 private:
  std::list<std::unique_ptr<std::byte[]>> chunks_;
  std::size_t chunk_bytes_ = 0;
  std::size_t used_ = 0;
  std::size_t total_used_ = 0;
};

class CpuOps final : public Ops {
 public:
  explicit CpuOps(const CpuOpsOptions& options)
      : options_(options),
        pool_(options.num_threads > 0 ? options.num_threads
                                      : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))) {}

  DType activation_dtype() const override { return DType::f32; }

  // Only to quantize their GEMMs' activations (CpuFp8Activations::e4m3_1x128);
  // otherwise the loader dequantizes, and the math is the same without it.
  bool keeps_fp8_block_weights(std::int32_t, std::int32_t) const override {
    return options_.fp8_activations == CpuFp8Activations::e4m3_1x128;
  }

  Result<Tensor> upload_weight(const Tensor& host) override { return host; }

  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override {
    SLUICE_CHECK(!parts.empty());
    std::int64_t rows = 0;
    for (const Tensor& part : parts) {
      SLUICE_CHECK(part.dtype == parts[0].dtype && part.cols() == parts[0].cols());
      rows += part.rows();
    }
    auto& storage = owned_.emplace_back(new std::byte[static_cast<std::size_t>(rows * parts[0].cols()) *
                                                      dtype_size_bytes(parts[0].dtype)]);
    std::byte* cursor = storage.get();
    for (const Tensor& part : parts) {
      std::memcpy(cursor, part.data, part.size_bytes());
      cursor += part.size_bytes();
    }
    Tensor out{storage.get(), parts[0].dtype, Shape{rows, parts[0].cols()}};
    if (!parts[0].scales.empty()) {  // FP8 parts: their scale grids stacked into one
      const ScaleGrid grid = stacked_scale_grid(parts, 1);
      const std::vector<float>& scales = owned_scales_.emplace_back(stack_block_scales(parts, grid));
      out.scales = BlockScales{.data = scales.data(),
                               .block_rows = parts[0].scales.block_rows,
                               .block_cols = parts[0].scales.block_cols,
                               .row_stride = grid.row_stride};
    }
    return out;
  }

  Result<std::unique_ptr<Ops>> make_lane(const LaneOptions& lane_options) override {
    if (lane_options.num_sms > 0) return Error{"a lane confined to SMs needs the cuda device"};
    auto lane = std::make_unique<CpuOps>(options_);
    lane->kv_spec_ = kv_spec_;
    lane->kv_pages_ = kv_pages_;
    return std::unique_ptr<Ops>(std::move(lane));
  }

  Status allocate_kv_cache(const KvCacheSpec& spec) override {
    kv_spec_ = spec;
    const auto layer_elems = static_cast<std::size_t>(spec.num_blocks) * spec.block_size_tokens *
                             spec.num_kv_heads * spec.head_dim;
    try {
      // A latent cache keeps its one entry per position in k.
      kv_pages_->k.assign(spec.num_layers, std::vector<float>(layer_elems));
      kv_pages_->v.assign(spec.layout == KvCacheLayout::key_value ? spec.num_layers : 0, std::vector<float>(layer_elems));
    } catch (const std::bad_alloc&) {
      return Error{"not enough host memory for the KV cache"};
    }
    return Ok{};
  }

  // The host tier of the reference: ordinary memory, [host block][K of each layer, then V][block_size * kv_heads * head_dim].
  Status allocate_host_kv_cache(std::int32_t num_blocks) override {
    try {
      host_kv_.assign(static_cast<std::size_t>(num_blocks) * host_block_elems(), 0.0f);
    } catch (const std::bad_alloc&) {
      return Error{"not enough host memory for the host KV tier"};
    }
    return Ok{};
  }
  // Nominal (memcpy): the planner only needs loads to look cheaper than recomputing.
  double host_link_bytes_per_s() const override { return 10e9; }
  // Synchronous memcpy: every copy is complete when this returns.
  Result<std::vector<KvCopyCompletion>> copy_kv_blocks(std::span<const KvBlockCopy> copies, bool) override {
    const std::size_t block_elems = layer_block_elems();
    const std::size_t num_host_blocks = host_kv_.empty() ? 0 : host_kv_.size() / host_block_elems();
    std::vector<KvCopyCompletion> done;
    for (const KvBlockCopy& c : copies) {
      if (c.host_block < 0 || static_cast<std::size_t>(c.host_block) >= num_host_blocks || c.device_block < 0 ||
          c.device_block >= kv_spec_.num_blocks) {
        return Error{"KV copy " + std::to_string(c.id) + " names a block outside the pools"};
      }
      float* host = host_kv_.data() + static_cast<std::size_t>(c.host_block) * host_block_elems();
      for (std::vector<std::vector<float>>* cache : {&kv_pages_->k, &kv_pages_->v}) {
        for (std::vector<float>& layer : *cache) {
          float* device = layer.data() + static_cast<std::size_t>(c.device_block) * block_elems;
          if (c.direction == KvCopyDirection::kDeviceToHost) {
            std::memcpy(host, device, block_elems * sizeof(float));
          } else {
            std::memcpy(device, host, block_elems * sizeof(float));
          }
          host += block_elems;
        }
      }
      done.push_back({.id = c.id});
    }
    return done;
  }

  Tensor scratch(Shape shape, DType dtype) override {
    Tensor t{nullptr, dtype, shape};
    t.data = arena_.allocate(t.size_bytes());
    return t;
  }

  void begin_step(const StepLayout& layout) override {
    arena_.reset();
    layout_ = &layout;
  }

  void embedding(const Tensor& table, Tensor out) override {
    const std::int64_t width = table.cols();
    SLUICE_CHECK_EQ(out.cols(), width);
    pool_.parallel_for(layout_->num_rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const TokenId token = layout_->token_ids[r];
        SLUICE_CHECK(token >= 0 && token < table.rows());
        to_f32(table, token * width, width, out.as<float>() + r * width);
      }
    });
  }

  Status embedding_shard(const Tensor& table, TokenId first_token_id, Tensor out) override {
    const std::int64_t width = table.cols();
    SLUICE_CHECK_EQ(out.cols(), width);
    pool_.parallel_for(layout_->num_rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const std::int64_t row = std::int64_t{layout_->token_ids[r]} - first_token_id;
        float* dst = out.as<float>() + r * width;
        if (row >= 0 && row < table.rows())
          to_f32(table, row * width, width, dst);
        else
          std::fill(dst, dst + width, 0.0f);
      }
    });
    return Ok{};
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    const std::int64_t width = x.cols();
    SLUICE_CHECK_EQ(weight.numel(), width);
    std::vector<float> w(static_cast<std::size_t>(width));
    to_f32(weight, 0, width, w.data());
    pool_.parallel_for(x.rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) normalize_row(x.as<const float>() + r * width, w.data(), width, eps,
                                                              out.as<float>() + r * width);
    });
  }

  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    const std::int64_t width = x.cols();
    std::vector<float> w(static_cast<std::size_t>(width));
    to_f32(weight, 0, width, w.data());
    pool_.parallel_for(x.rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        float* res = residual.as<float>() + r * width;
        const float* in = x.as<const float>() + r * width;
        for (std::int64_t i = 0; i < width; ++i) res[i] += in[i];
        normalize_row(res, w.data(), width, eps, out.as<float>() + r * width);
      }
    });
  }

  void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) override {
    const std::int64_t num_rows = x.rows(), k = x.cols(), n = w.rows();
    SLUICE_CHECK_EQ(w.cols(), k);
    SLUICE_CHECK_EQ(out.cols(), n);
    SLUICE_CHECK_EQ(out.rows(), num_rows);
    std::vector<float> bias_f32;
    if (bias.data) {
      bias_f32.resize(static_cast<std::size_t>(n));
      to_f32(bias, 0, n, bias_f32.data());
    }
    const float* xs = x.as<const float>();
    std::vector<float> quantized;  // CpuFp8Activations::e4m3_1x128 (only then is a weight FP8 here)
    if (w.dtype == DType::f8_e4m3 && num_rows > options_.fp8_dense_unquantized_max_rows) {
      quantized.resize(static_cast<std::size_t>(num_rows * k));
      pool_.parallel_for(num_rows, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) cpu::quantize_fp8_activations(xs + i * k, k, quantized.data() + i * k);
      });
      xs = quantized.data();
    }
    float* outs = out.as<float>();
    pool_.parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> row(static_cast<std::size_t>(k));
      for (std::int64_t j = begin; j < end; ++j) {
        cpu::weight_row_f32(w, j, row.data());
        const float b = bias.data ? bias_f32[j] : 0.0f;
        for (std::int64_t i = 0; i < num_rows; ++i) outs[i * n + j] = dot(xs + i * k, row.data(), k) + b;
      }
    });
  }

  void rope(Tensor q, Tensor k, const RopeParams& params) override {
    const std::vector<float> inv_freq = rope_inverse_frequencies(params);
    const std::int64_t half = params.head_dim / 2;
    pool_.parallel_for(layout_->num_rows(), [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> cos_row(static_cast<std::size_t>(half)), sin_row(static_cast<std::size_t>(half));
      for (std::int64_t r = begin; r < end; ++r) {
        const float position = static_cast<float>(layout_->positions[r]);
        for (std::int64_t i = 0; i < half; ++i) {
          const float angle = position * inv_freq[i];
          cos_row[i] = std::cos(angle);
          sin_row[i] = std::sin(angle);
        }
        for (Tensor* t : {&q, &k}) {
          float* row = t->as<float>() + r * t->cols();
          for (std::int64_t head = 0; head < t->cols() / params.head_dim; ++head) {
            float* x = row + head * params.head_dim;
            for (std::int64_t i = 0; i < half; ++i) {
              const float x1 = x[i], x2 = x[i + half];
              x[i] = x1 * cos_row[i] - x2 * sin_row[i];
              x[i + half] = x2 * cos_row[i] + x1 * sin_row[i];
            }
          }
        }
      }
    });
  }

  void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v, float scale,
                 Tensor out) override {
    SLUICE_CHECK(kv_spec_.layout == KvCacheLayout::key_value);
    const std::int64_t head_dim = kv_spec_.head_dim;
    const std::int64_t num_kv_heads = kv_spec_.num_kv_heads;
    const std::int64_t num_q_heads = q.cols() / head_dim;
    const std::int64_t group = num_q_heads / num_kv_heads;
    const std::int64_t kv_width = num_kv_heads * head_dim;
    float* k_layer = kv_pages_->k[layer].data();
    float* v_layer = kv_pages_->v[layer].data();
    auto slot_offset = [&](const SequenceLayout& seq, std::int64_t position) {
      const std::int64_t block = seq.block_table[position / kv_spec_.block_size_tokens];
      SLUICE_CHECK(block >= 0 && block < kv_spec_.num_blocks);
      return (block * kv_spec_.block_size_tokens + position % kv_spec_.block_size_tokens) * kv_width;
    };
    for (const SequenceLayout& seq : layout_->sequences)
      for (std::int64_t i = 0; i < seq.num_rows; ++i) {
        const std::int64_t row = seq.row_begin + i;
        const std::int64_t slot = slot_offset(seq, seq.num_computed_tokens + i);
        std::memcpy(k_layer + slot, k.as<const float>() + row * kv_width, static_cast<std::size_t>(kv_width) * 4);
        std::memcpy(v_layer + slot, v.as<const float>() + row * kv_width, static_cast<std::size_t>(kv_width) * 4);
      }
    // One work item per (sequence row, query head).
    std::vector<std::pair<const SequenceLayout*, std::int64_t>> rows;
    for (const SequenceLayout& seq : layout_->sequences)
      for (std::int64_t i = 0; i < seq.num_rows; ++i) rows.emplace_back(&seq, i);
    pool_.parallel_for(static_cast<std::int64_t>(rows.size()) * num_q_heads, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> scores;
      for (std::int64_t item = begin; item < end; ++item) {
        const auto& [seq, i] = rows[item / num_q_heads];
        const std::int64_t head = item % num_q_heads;
        const std::int64_t kv_head = head / group;
        const std::int64_t row = seq->row_begin + i;
        const std::int64_t context = seq->num_computed_tokens + i + 1;
        const float* query = q.as<const float>() + row * q.cols() + head * head_dim;
        scores.resize(static_cast<std::size_t>(context));
        float max_score = -INFINITY;
        for (std::int64_t p = 0; p < context; ++p) {
          scores[p] = dot(query, k_layer + slot_offset(*seq, p) + kv_head * head_dim, head_dim) * scale;
          max_score = std::max(max_score, scores[p]);
        }
        float total = 0.0f;
        for (float& s : scores) total += (s = std::exp(s - max_score));
        float* o = out.as<float>() + row * out.cols() + head * head_dim;
        std::fill(o, o + head_dim, 0.0f);
        for (std::int64_t p = 0; p < context; ++p) {
          const float weight = scores[p] / total;
          const float* value = v_layer + slot_offset(*seq, p) + kv_head * head_dim;
          for (std::int64_t d = 0; d < head_dim; ++d) o[d] += weight * value[d];
        }
      }
    });
  }

  void silu_mul(const Tensor& gate_up, Tensor out) override {
    const std::int64_t width = out.cols();
    SLUICE_CHECK_EQ(gate_up.cols(), 2 * width);
    pool_.parallel_for(gate_up.rows(), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        const float* gate = gate_up.as<const float>() + r * 2 * width;
        const float* up = gate + width;
        float* o = out.as<float>() + r * width;
        for (std::int64_t i = 0; i < width; ++i) o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      }
    });
  }

  Status rope_partial(Tensor x, std::int32_t head_stride, std::int32_t rotary_offset,
                      const RopeParams& params) override {
    cpu::rope_partial({.pool = pool_, .layout = *layout_}, x, {.head_stride = head_stride, .rotary_offset = rotary_offset},
                      params);
    return Ok{};
  }

  Status mla_attention(std::int32_t layer, const MlaInputs& in, const MlaShape& shape, Tensor out) override {
    SLUICE_CHECK(kv_spec_.layout == KvCacheLayout::latent);
    const cpu::LatentCacheView cache{.data = kv_pages_->k[layer].data(), .spec = &kv_spec_};
    cpu::mla_attention({.pool = pool_, .layout = *layout_}, cache, in, shape, out);
    return Ok{};
  }

  Status moe_route(const Tensor& router_logits, const Tensor& correction_bias, const MoeRouting& routing,
                   MoeAssignment out) override {
    cpu::moe_route(pool_, router_logits, correction_bias, routing, out);
    return Ok{};
  }

  Status moe_experts(const Tensor& x, const MoeExpertWeights& experts, const MoeAssignment& assignment,
                     Tensor out) override {
    cpu::moe_experts(pool_, x, experts, assignment, out);
    return Ok{};
  }

  const DeepseekV4Kernels* deepseek_v4_kernels() const override { return &deepseek_v4_kernels_; }

  std::span<float> model_defined_kv_block(BlockId block) override {
    SLUICE_CHECK(kv_spec_.layout == KvCacheLayout::model_defined);
    SLUICE_CHECK(block >= 0 && block < kv_spec_.num_blocks);
    return std::span<float>(kv_pages_->k.front()).subspan(static_cast<std::size_t>(block) * layer_block_elems(),
                                                      layer_block_elems());
  }

  void gather_sample_rows(const Tensor& x, Tensor out) override {
    const std::int64_t width = x.cols();
    for (std::size_t i = 0; i < layout_->sample_rows.size(); ++i)
      std::memcpy(out.as<float>() + static_cast<std::int64_t>(i) * width,
                  x.as<const float>() + layout_->sample_rows[i] * width, static_cast<std::size_t>(width) * 4);
  }

  std::vector<SampleResult> sample(const Tensor& logits, std::span<const SampleRequest> requests) override {
    SLUICE_CHECK_EQ(static_cast<std::int64_t>(requests.size()), logits.rows());
    std::vector<SampleResult> results(requests.size());
    const std::int64_t vocab = logits.cols();
    pool_.parallel_for(static_cast<std::int64_t>(requests.size()), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i)
        results[i] = sample_logits({logits.as<const float>() + i * vocab, static_cast<std::size_t>(vocab)}, requests[i]);
    });
    return results;
  }

 private:
  static void normalize_row(const float* x, const float* weight, std::int64_t width, float eps, float* out) {
    double sum_squares = 0.0;
    for (std::int64_t i = 0; i < width; ++i) sum_squares += double{x[i]} * x[i];
    const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / static_cast<double>(width)) + eps);
    for (std::int64_t i = 0; i < width; ++i) out[i] = weight[i] * (x[i] * inv_rms);
  }

  const CpuOpsOptions options_;
  ThreadPool pool_;
  ScratchArena arena_;
  cpu::DeepseekV4CpuKernels deepseek_v4_kernels_;
  const StepLayout* layout_ = nullptr;
  std::size_t layer_block_elems() const {
    return static_cast<std::size_t>(kv_spec_.block_size_tokens) * static_cast<std::size_t>(kv_spec_.num_kv_heads) *
           static_cast<std::size_t>(kv_spec_.head_dim);
  }
  std::size_t host_block_elems() const { return layer_block_elems() * (kv_pages_->k.size() + kv_pages_->v.size()); }

  KvCacheSpec kv_spec_;
  std::vector<float> host_kv_;  // [host blocks][K of each layer, then V of each][block elems]
  // per layer [blocks, block_size, kv_heads, head_dim]; a latent cache has no v.
  // Shared with the lanes made from this Ops (make_lane).
  struct KvPages {
    std::vector<std::vector<float>> k, v;
  };
  std::shared_ptr<KvPages> kv_pages_ = std::make_shared<KvPages>();
  std::vector<std::unique_ptr<std::byte[]>> owned_;    // fused weights
  std::list<std::vector<float>> owned_scales_;          // their stacked FP8 block scales
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops(const CpuOpsOptions& options) { return std::make_unique<CpuOps>(options); }

}  // namespace sluice
