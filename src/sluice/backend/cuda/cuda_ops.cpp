#include "sluice/backend/cuda/cuda_ops.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "sluice/backend/cpu/sampler.h"
#include "sluice/backend/cuda/cuda_check.h"
#include "sluice/backend/cuda/kernels/kernels.h"
#include "sluice/backend/cuda/lt_gemm.h"
#include "sluice/backend/float_convert.h"
#include "sluice/backend/prefill_split_plan.h"
#include "sluice/backend/rope.h"
#include "sluice/common/rng.h"

namespace sluice {
namespace {

using cuda::Dt;

Dt dt_of(DType dtype) {
  SLUICE_CHECK_MSG(dtype != DType::i32, "float tensor expected");
  return static_cast<Dt>(static_cast<std::int32_t>(dtype));
}

constexpr std::int64_t kAlignBytes = 256;
std::int64_t align_up(std::int64_t n, std::int64_t a) { return (n + a - 1) / a * a; }

// Host memory the device copies from asynchronously; grows, never shrinks.
class PinnedBuffer {
 public:
  ~PinnedBuffer() { cudaFreeHost(data_); }
  void* ensure(std::int64_t bytes) {
    if (bytes > capacity_) {
      cudaFreeHost(data_);
      capacity_ = std::max(bytes, 2 * capacity_);
      SLUICE_CUDA_CHECK(cudaMallocHost(&data_, static_cast<std::size_t>(capacity_)));
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  std::int64_t capacity_ = 0;
};

// What the device sampler (kernels/sampling_topk.cu) reads for a step's rows:
// their parameters, each row's distinct history tokens with generated counts
// (only when it has penalties) and its allowed-token mask words. Rebuilt by
// every sample() call; the vectors keep their capacity.
class DeviceSamplePack {
 public:
  void clear() {
    rows.clear();
    penalties.clear();
    mask_words.clear();
  }
  void add(const SampleRequest& request, std::int32_t logits_row, std::int64_t vocab) {
    const SamplingParams& params = request.params;
    cuda::DeviceSampleRow row{
        .uniform = uniform_from(params.seed, static_cast<std::uint64_t>(request.generated_index)),
        .logits_row = logits_row,
        .greedy = params.is_greedy() ? 1 : 0,
        .inverse_temperature = params.is_greedy() ? 1.0f : 1.0f / params.temperature,
        .top_k = params.top_k,
        .top_p = params.top_p,
        .min_p = params.min_p,
        .repetition_penalty = params.repetition_penalty,
        .presence_penalty = params.presence_penalty,
        .frequency_penalty = params.frequency_penalty,
        .num_top_logprobs = params.num_top_logprobs,
        .penalty_begin = static_cast<std::int32_t>(penalties.size()),
    };
    if (params.has_penalties()) add_history(request, vocab);
    row.num_penalties = static_cast<std::int32_t>(penalties.size()) - row.penalty_begin;
    if (!request.allowed_tokens.empty()) {
      row.mask_word_begin = static_cast<std::int64_t>(mask_words.size());
      row.num_mask_words = static_cast<std::int32_t>(request.allowed_tokens.size());
      mask_words.insert(mask_words.end(), request.allowed_tokens.begin(), request.allowed_tokens.end());
    }
    rows.push_back(row);
  }

  std::vector<cuda::DeviceSampleRow> rows;
  std::vector<cuda::DevicePenaltyEntry> penalties;
  std::vector<std::uint64_t> mask_words;

 private:
  // One entry per distinct token in range: every history token when the
  // repetition penalty is on, else the generated ones (the only ones the
  // presence and frequency penalties touch). A stamp per vocabulary id finds
  // a token's entry without a hash map (O(history) a row).
  void add_history(const SampleRequest& request, std::int64_t vocab) {
    if (stamp_.size() != static_cast<std::size_t>(vocab)) {
      stamp_.assign(static_cast<std::size_t>(vocab), 0);
      entry_of_.assign(static_cast<std::size_t>(vocab), 0);
      epoch_ = 0;
    }
    if (++epoch_ == 0) {
      std::fill(stamp_.begin(), stamp_.end(), 0);
      epoch_ = 1;
    }
    const bool whole_history = request.params.repetition_penalty != 1.0f;
    for (std::size_t i = 0; i < request.tokens.size(); ++i) {
      const TokenId t = request.tokens[i];
      const bool generated = i >= static_cast<std::size_t>(request.num_prompt_tokens);
      if (t < 0 || t >= vocab || !(generated || whole_history)) continue;
      if (stamp_[t] != epoch_) {
        stamp_[t] = epoch_;
        entry_of_[t] = static_cast<std::int32_t>(penalties.size());
        penalties.push_back({.token = t, .num_generated = 0});
      }
      if (generated) ++penalties[entry_of_[t]].num_generated;
    }
  }

  std::vector<std::uint32_t> stamp_;     // [vocab] epoch_ when the token has an entry in this row
  std::vector<std::int32_t> entry_of_;   // [vocab] its index in penalties
  std::uint32_t epoch_ = 0;
};

// A bump allocator over device chunks. A step that overflows the current
// chunk gets a new one (earlier pointers stay valid); at the next reset the
// chunks are merged into one of the combined size.
class ScratchArena {
 public:
  explicit ScratchArena(std::int64_t initial_bytes) : initial_bytes_(initial_bytes) {}
  ~ScratchArena() {
    for (auto& c : chunks_) cudaFree(c.base);
  }
  // Changes whenever chunk addresses change: captured graphs hold them.
  std::uint64_t generation() const { return generation_; }
  void reset() {
    if (chunks_.size() > 1) {
      ++generation_;
      std::int64_t total = 0;
      for (auto& c : chunks_) {
        total += c.capacity;
        SLUICE_CUDA_CHECK(cudaFree(c.base));  // synchronises: the previous step may still read it
      }
      chunks_.clear();
      add_chunk(total);
    }
    for (auto& c : chunks_) c.used = 0;
    current_ = 0;
  }
  void* allocate(std::int64_t bytes) {
    bytes = align_up(std::max<std::int64_t>(bytes, 1), kAlignBytes);
    if (chunks_.empty()) add_chunk(std::max(bytes, initial_bytes_));
    Chunk* c = &chunks_[current_];
    if (c->used + bytes > c->capacity) {
      add_chunk(std::max(bytes, initial_bytes_));
      current_ = chunks_.size() - 1;
      c = &chunks_[current_];
    }
    void* out = static_cast<std::byte*>(c->base) + c->used;
    c->used += bytes;
    return out;
  }

 private:
  struct Chunk {
    void* base = nullptr;
    std::int64_t capacity = 0;
    std::int64_t used = 0;
  };
  void add_chunk(std::int64_t bytes) {
    Chunk c;
    const cudaError_t status = cudaMalloc(&c.base, static_cast<std::size_t>(bytes));
    SLUICE_CHECK_MSG(status == cudaSuccess,
                     fmt::format("scratch arena: cudaMalloc of {} bytes failed ({})", bytes,
                                 cudaGetErrorString(status)));
    c.capacity = bytes;
    chunks_.push_back(c);
  }
  std::int64_t initial_bytes_;
  std::vector<Chunk> chunks_;
  std::size_t current_ = 0;
  std::uint64_t generation_ = 0;
};

class CudaOps final : public Ops {
 public:
  CudaOps(const CudaOpsOptions& options, cudaStream_t stream)
      : options_(options), stream_(stream), scratch_(options.scratch_bytes),
        gemm_(stream, options.gemm_workspace_bytes) {
    SLUICE_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
    int device = 0;
    SLUICE_CUDA_CHECK(cudaGetDevice(&device));
    SLUICE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  }
  ~CudaOps() override {
    if (mode_ == Mode::capturing) {
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(stream_, &graph);
      if (graph != nullptr) cudaGraphDestroy(graph);
    }
    cudaStreamSynchronize(stream_);
    clear_graphs();
    for (void* p : weights_) cudaFree(p);
    for (auto& [key, p] : inv_freq_) cudaFree(p);
    cudaFree(kv_cache_);
    cudaFree(step_device_);
    cudaFree(sample_device_);
    cudaEventDestroy(upload_done_);
    cudaStreamDestroy(stream_);
  }

  cudaStream_t stream() const { return stream_; }

  // --- memory ---
  DType activation_dtype() const override { return DType::bf16; }

  Result<Tensor> upload_weight(const Tensor& host) override {
    return upload_concatenated(std::span<const Tensor>(&host, 1));
  }

  Result<Tensor> upload_concatenated(std::span<const Tensor> parts) override {
    SLUICE_CHECK(!parts.empty());
    const Tensor& first = parts[0];
    if (first.dtype == DType::i32) return Error{"CUDA backend: integer weights are not supported"};
    // Matrices become bf16 (the GEMM and embedding dtype); vectors keep theirs.
    const DType target = first.shape.rank >= 2 ? DType::bf16 : first.dtype;
    std::int64_t rows = 0;
    for (const Tensor& part : parts) {
      SLUICE_CHECK(part.dtype == first.dtype && part.cols() == first.cols());
      rows += part.shape.rank >= 2 ? part.rows() : part.numel();
    }
    const Shape shape = first.shape.rank >= 2 ? Shape{rows, first.cols()} : Shape{rows};
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(target));
    SLUICE_TRY_ASSIGN(device, device_alloc(bytes, "weight"));
    std::int64_t offset_bytes = 0;
    for (const Tensor& part : parts) {
      copy_converted(part, target, static_cast<std::byte*>(device) + offset_bytes);
      offset_bytes += part.numel() * static_cast<std::int64_t>(dtype_size_bytes(target));
    }
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Tensor{device, target, shape};
  }

  Status allocate_kv_cache(const KvCacheSpec& spec) override {
    if (spec.layout != KvCacheLayout::key_value)
      return Error{"CUDA backend: the MLA latent KV cache is not implemented on cuda yet"};
    if (!cuda::split_kernel_supports(spec.head_dim))
      return Error{fmt::format("CUDA backend: head_dim {} is not supported (16, 32, 64, 128, 256)",
                               spec.head_dim)};
    if (spec.num_kv_heads <= 0 || spec.num_layers <= 0 || spec.num_blocks <= 0 ||
        spec.block_size_tokens <= 0)
      return Error{"CUDA backend: KV cache spec has a zero dimension"};
    const std::int64_t bytes = spec.bytes_per_block(DType::bf16) * spec.num_blocks;
    if (kv_cache_ != nullptr) SLUICE_CUDA_CHECK(cudaFree(kv_cache_));
    kv_cache_ = nullptr;
    if (cudaMalloc(&kv_cache_, static_cast<std::size_t>(bytes)) != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return Error{fmt::format(
          "CUDA backend: the KV cache needs {:.2f} GiB ({} blocks x {} bytes) but only {:.2f} GiB "
          "of {:.2f} GiB is free",
          bytes / 1073741824.0, spec.num_blocks, spec.bytes_per_block(DType::bf16),
          free_bytes / 1073741824.0, total_bytes / 1073741824.0)};
    }
    SLUICE_CUDA_CHECK(cudaMemsetAsync(kv_cache_, 0, static_cast<std::size_t>(bytes), stream_));
    kv_spec_ = spec;
    clear_graphs();  // they hold the old cache's address
    return Ok{};
  }

  Tensor scratch(Shape shape, DType dtype) override {
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(dtype));
    return Tensor{scratch_.allocate(bytes), dtype, shape};
  }

  std::optional<std::int64_t> device_memory_free_bytes() const override {
    std::size_t free_bytes = 0, total_bytes = 0;
    SLUICE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return static_cast<std::int64_t>(free_bytes);
  }

  // --- step ---
  void begin_step(const StepLayout& layout) override {
    // The current device is per host thread; the engine may step on another
    // thread than the one that made this Ops.
    SLUICE_CUDA_CHECK(cudaSetDevice(options_.device_index));
    finish_step_graph();
    scratch_.reset();
    std::optional<GraphKey> key = graph_key(layout);
    upload_layout(layout, key);
    if (!key) return;
    key->metadata_generation = metadata_generation_;  // the upload may have moved the buffer
    if (auto it = graphs_.find(*key); it != graphs_.end()) {
      mode_ = Mode::replaying;
      replay_ = it->second;
    } else {
      SLUICE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
      mode_ = Mode::capturing;
      capture_key_ = *key;
    }
  }

  void embedding(const Tensor& table, Tensor out) override {
    SLUICE_CHECK_EQ(out.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(out.cols(), table.cols());
    if (!launching()) return;
    cuda::launch_embedding(view_, table.data, dt_of(table.dtype), table.cols(), out.data,
                           dt_of(out.dtype), stream_);
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) override {
    SLUICE_CHECK_EQ(x.numel(), out.numel());
    SLUICE_CHECK_EQ(weight.numel(), x.cols());
    if (!launching()) return;
    cuda::launch_rms_norm(x.data, dt_of(x.dtype), weight.data, dt_of(weight.dtype), eps, x.rows(),
                          x.cols(), out.data, dt_of(out.dtype), stream_);
  }

  void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                    Tensor out) override {
    SLUICE_CHECK_EQ(residual.numel(), x.numel());
    SLUICE_CHECK_EQ(residual.numel(), out.numel());
    SLUICE_CHECK_EQ(weight.numel(), x.cols());
    if (!launching()) return;
    cuda::launch_add_rms_norm(residual.data, dt_of(residual.dtype), x.data, dt_of(x.dtype),
                              weight.data, dt_of(weight.dtype), eps, x.rows(), x.cols(), out.data,
                              dt_of(out.dtype), stream_);
  }

  void matmul(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor out) override {
    SLUICE_CHECK_MSG(x.dtype == DType::bf16 && w.dtype == DType::bf16,
                     "CUDA matmul takes bf16 activations and weights");
    SLUICE_CHECK_EQ(x.cols(), w.cols());
    SLUICE_CHECK_EQ(out.rows(), x.rows());
    SLUICE_CHECK_EQ(out.cols(), w.rows());
    SLUICE_CHECK(out.dtype == DType::bf16 || out.dtype == DType::f32);
    if (!launching()) return;
    if (!cuda::launch_gemv(x.data, w.data, out.data, dt_of(out.dtype), x.rows(), w.rows(), x.cols(),
                           stream_))
      gemm_.run(x.data, w.data, out.data, out.dtype, x.rows(), w.rows(), x.cols());
    if (bias.data != nullptr) {
      SLUICE_CHECK_EQ(bias.numel(), w.rows());
      cuda::launch_add_bias(out.data, dt_of(out.dtype), bias.data, dt_of(bias.dtype), out.rows(),
                            out.cols(), stream_);
    }
  }

  // Decode batches (<= kGemvMaxRows rows): one GEMV pass over the stacked
  // q|k|v weight writing q, k and v; larger batches: the three GEMMs.
  void qkv_projection(const Tensor& x, const Tensor& w_qkv, std::span<const Tensor, 3> biases, Tensor q,
                      Tensor k, Tensor v) override {
    const bool fused = x.rows() <= cuda::kGemvMaxRows && x.cols() % 8 == 0 && x.dtype == DType::bf16 &&
                       w_qkv.dtype == DType::bf16 && q.dtype == k.dtype && q.dtype == v.dtype;
    if (!fused) {
      Ops::qkv_projection(x, w_qkv, biases, q, k, v);
      return;
    }
    SLUICE_CHECK_EQ(x.cols(), w_qkv.cols());
    SLUICE_CHECK_EQ(w_qkv.rows(), q.cols() + k.cols() + v.cols());
    for (const Tensor* t : {&q, &k, &v}) SLUICE_CHECK_EQ(t->rows(), x.rows());
    SLUICE_CHECK(q.dtype == DType::bf16 || q.dtype == DType::f32);
    if (!launching()) return;
    cuda::GemvOutputs outs;
    outs.num_parts = 3;
    outs.dt = dt_of(q.dtype);
    const std::array<Tensor*, 3> parts = {&q, &k, &v};
    for (int i = 0; i < 3; ++i) {
      outs.data[i] = parts[i]->data;
      outs.cols[i] = parts[i]->cols();
    }
    SLUICE_CHECK(cuda::launch_gemv_parts(x.data, w_qkv.data, outs, x.rows(), x.cols(), stream_));
    for (int i = 0; i < 3; ++i) {
      if (biases[i].data == nullptr) continue;
      SLUICE_CHECK_EQ(biases[i].numel(), parts[i]->cols());
      cuda::launch_add_bias(parts[i]->data, dt_of(parts[i]->dtype), biases[i].data, dt_of(biases[i].dtype),
                            parts[i]->rows(), parts[i]->cols(), stream_);
    }
  }

  // Decode batches: the SwiGLU is the GEMV's epilogue (no [rows, 2I]
  // intermediate, no silu kernel); larger batches: GEMM then silu_mul.
  void gate_up_silu(const Tensor& x, const Tensor& w_gate_up, Tensor gate_up, Tensor out) override {
    const bool fused = x.rows() <= cuda::kGemvMaxRows && x.cols() % 8 == 0 && x.dtype == DType::bf16 &&
                       w_gate_up.dtype == DType::bf16 &&
                       (out.dtype == DType::bf16 || out.dtype == DType::f32);
    if (!fused) {
      Ops::gate_up_silu(x, w_gate_up, gate_up, out);
      return;
    }
    SLUICE_CHECK_EQ(x.cols(), w_gate_up.cols());
    SLUICE_CHECK_EQ(w_gate_up.rows(), 2 * out.cols());
    SLUICE_CHECK_EQ(out.rows(), x.rows());
    if (!launching()) return;
    SLUICE_CHECK(cuda::launch_gemv_swiglu(x.data, w_gate_up.data, out.data, dt_of(out.dtype), x.rows(),
                                          out.cols(), x.cols(), stream_));
  }

  void rope(Tensor q, Tensor k, const RopeParams& params) override {
    const std::int64_t head_dim = params.head_dim;
    SLUICE_CHECK(head_dim > 0 && head_dim % 2 == 0);
    SLUICE_CHECK_EQ(q.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(k.rows(), static_cast<std::int64_t>(view_.num_rows));
    SLUICE_CHECK_EQ(q.cols() % head_dim, std::int64_t{0});
    SLUICE_CHECK_EQ(k.cols() % head_dim, std::int64_t{0});
    if (!launching()) return;
    if (mode_ == Mode::capturing && fuse_rope_kv_write_ && k.dtype == DType::bf16) {
      deferred_rope_ = DeferredRope{q.data, dt_of(q.dtype), k.data, static_cast<std::int32_t>(q.cols() / head_dim),
                                    static_cast<std::int32_t>(k.cols() / head_dim), params.head_dim,
                                    inverse_frequencies(params)};
      return;
    }
    cuda::launch_rope(view_, q.data, dt_of(q.dtype), static_cast<std::int32_t>(q.cols() / head_dim),
                      k.data, dt_of(k.dtype), static_cast<std::int32_t>(k.cols() / head_dim),
                      params.head_dim, inverse_frequencies(params), stream_);
  }

  void attention(std::int32_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                 float scale, Tensor out) override {
    SLUICE_CHECK_MSG(kv_cache_ != nullptr, "attention before allocate_kv_cache");
    SLUICE_CHECK(layer >= 0 && layer < kv_spec_.num_layers);
    SLUICE_CHECK(q.dtype == DType::bf16 && k.dtype == DType::bf16 && v.dtype == DType::bf16 &&
                 out.dtype == DType::bf16);
    const std::int64_t head_dim = kv_spec_.head_dim;
    const std::int64_t kv_width = static_cast<std::int64_t>(kv_spec_.num_kv_heads) * head_dim;
    SLUICE_CHECK_EQ(k.cols(), kv_width);
    SLUICE_CHECK_EQ(v.cols(), kv_width);
    SLUICE_CHECK_EQ(q.numel(), out.numel());
    SLUICE_CHECK_EQ(q.rows(), static_cast<std::int64_t>(view_.num_rows));
    const auto num_q_heads = static_cast<std::int32_t>(q.cols() / head_dim);
    SLUICE_CHECK_EQ(num_q_heads % kv_spec_.num_kv_heads, 0);

    cuda::AttentionArgs args = attention_args(q, out, layer, scale);
    // Allocated when replaying too: later scratch must land where it was captured.
    if (view_.num_split_rows > 0)
      args.workspace = scratch_.allocate(cuda::split_workspace_bytes(view_, args));
    if (view_.num_prefill_split_pieces > 0)
      args.prefill_split_workspace = scratch_.allocate(cuda::prefill_split_workspace_bytes(view_, args));
    attention_q_heads_ = num_q_heads;
    if (replaying()) return;
    if (deferred_rope_ && deferred_rope_->q == q.data && deferred_rope_->k == k.data &&
        deferred_rope_->num_kv_heads == kv_spec_.num_kv_heads && deferred_rope_->head_dim == head_dim) {
      const cuda::RopeKvWriteArgs fused{.q = q.data, .q_dt = deferred_rope_->q_dt, .k = k.data, .v = v.data,
                                        .k_cache = const_cast<void*>(args.k_cache),
                                        .v_cache = const_cast<void*>(args.v_cache),
                                        .inv_freq = deferred_rope_->inv_freq,
                                        .num_q_heads = deferred_rope_->num_q_heads,
                                        .num_kv_heads = kv_spec_.num_kv_heads, .head_dim = kv_spec_.head_dim,
                                        .block_size = kv_spec_.block_size_tokens};
      deferred_rope_.reset();
      cuda::launch_rope_kv_write(view_, fused, stream_);
    } else {
      flush_deferred_rope();
      cuda::launch_kv_write(view_, k.data, v.data, const_cast<void*>(args.k_cache),
                            const_cast<void*>(args.v_cache), kv_spec_.num_kv_heads, kv_spec_.head_dim,
                            kv_spec_.block_size_tokens, stream_);
    }
    cuda::launch_attention_prefill(view_, args, stream_);
    cuda::launch_attention_prefill_split(view_, args, stream_);
    cuda::launch_attention_split(view_, args, stream_);
  }

  void silu_mul(const Tensor& gate_up, Tensor out) override {
    SLUICE_CHECK_EQ(gate_up.cols(), 2 * out.cols());
    SLUICE_CHECK_EQ(gate_up.rows(), out.rows());
    if (!launching()) return;
    cuda::launch_silu_mul(gate_up.data, dt_of(gate_up.dtype), out.rows(), out.cols(), out.data,
                          dt_of(out.dtype), stream_);
  }

  // DeepSeek-V3 (issue 15): the CPU reference has them; these kernels come later.
  Status rope_partial(Tensor, std::int32_t, std::int32_t, const RopeParams&) override {
    return Error{"CUDA backend: rope_partial (DeepSeek-V3 MLA rope) is not implemented on cuda yet"};
  }
  Status mla_attention(std::int32_t, const MlaInputs&, const MlaShape&, Tensor) override {
    return Error{"CUDA backend: mla_attention is not implemented on cuda yet"};
  }
  Status moe_route(const Tensor&, const Tensor&, const MoeRouting&, MoeAssignment) override {
    return Error{"CUDA backend: moe_route is not implemented on cuda yet"};
  }
  Status moe_experts(const Tensor&, const MoeExpertWeights&, const MoeAssignment&, Tensor) override {
    return Error{"CUDA backend: moe_experts is not implemented on cuda yet"};
  }

  void gather_sample_rows(const Tensor& x, Tensor out) override {
    SLUICE_CHECK_EQ(out.rows(), static_cast<std::int64_t>(view_.num_sample_rows));
    SLUICE_CHECK_EQ(out.cols(), x.cols());
    SLUICE_CHECK(out.dtype == x.dtype);
    if (!launching()) return;
    cuda::launch_gather_rows(x.data, dt_of(x.dtype), x.cols(), view_.sample_rows,
                             view_.num_sample_rows, out.data, stream_);
  }

  std::vector<SampleResult> sample(const Tensor& logits,
                                   std::span<const SampleRequest> requests) override;

  Status fill_kv_cache_random(std::uint64_t seed) {
    if (kv_cache_ == nullptr) return Error{"cuda_fill_kv_cache_random: no KV cache yet"};
    const std::int64_t elems = kv_spec_.bytes_per_block(DType::bf16) * kv_spec_.num_blocks / 2;
    cuda::launch_random_fill(kv_cache_, dt_of(DType::bf16), elems, seed, 1.0f, stream_);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Ok{};
  }

  Result<Tensor> random_weight(Shape shape, DType dtype, std::uint64_t seed, float scale) {
    const std::int64_t bytes = shape.numel() * static_cast<std::int64_t>(dtype_size_bytes(dtype));
    SLUICE_TRY_ASSIGN(device, device_alloc(bytes, "random weight"));
    cuda::launch_random_fill(device, dt_of(dtype), shape.numel(), seed, scale, stream_);
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return Tensor{device, dtype, shape};
  }

 private:
  Result<void*> device_alloc(std::int64_t bytes, const char* what) {
    void* p = nullptr;
    if (cudaMalloc(&p, static_cast<std::size_t>(std::max<std::int64_t>(bytes, 1))) != cudaSuccess) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return Error{fmt::format("CUDA backend: cannot allocate {} of {:.2f} GiB: {:.2f} GiB of "
                               "{:.2f} GiB free (the model does not fit on this GPU)",
                               what, bytes / 1073741824.0, free_bytes / 1073741824.0,
                               total_bytes / 1073741824.0)};
    }
    weights_.push_back(p);
    return p;
  }

  // Host tensor -> device, converted to `target`, through a pinned staging buffer.
  void copy_converted(const Tensor& host, DType target, void* device) {
    constexpr std::int64_t kChunkElems = 16LL << 20;
    const std::int64_t n = host.numel();
    const std::size_t out_size = dtype_size_bytes(target);
    for (std::int64_t begin = 0; begin < n; begin += kChunkElems) {
      const std::int64_t count = std::min(kChunkElems, n - begin);
      auto* staging = static_cast<std::byte*>(staging_.ensure(kChunkElems * 4));
      SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the staging buffer is free again
      if (host.dtype == target) {
        std::memcpy(staging, static_cast<const std::byte*>(host.data) + begin * out_size,
                    static_cast<std::size_t>(count) * out_size);
      } else {
        for (std::int64_t i = 0; i < count; ++i) {
          const float value = host_to_f32(host, begin + i);
          if (target == DType::bf16) {
            const std::uint16_t bits = f32_to_bf16(value);
            std::memcpy(staging + i * 2, &bits, 2);
          } else {
            SLUICE_CHECK(target == DType::f32);
            std::memcpy(staging + i * 4, &value, 4);
          }
        }
      }
      SLUICE_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(device) + begin * out_size, staging,
                                        static_cast<std::size_t>(count) * out_size,
                                        cudaMemcpyHostToDevice, stream_));
    }
  }

  static float host_to_f32(const Tensor& t, std::int64_t i) {
    switch (t.dtype) {
      case DType::f32: return t.as<const float>()[i];
      case DType::bf16: return bf16_to_f32(t.as<const std::uint16_t>()[i]);
      case DType::f16: return f16_to_f32(t.as<const std::uint16_t>()[i]);
      case DType::i32: break;
      case DType::f8_e4m3: break;
    }
    SLUICE_CHECK_MSG(false, "float tensor expected");
    return 0.0f;
  }

  const float* inverse_frequencies(const RopeParams& params) {
    const auto key = std::make_tuple(params.head_dim, params.theta, params.llama3_factor,
                                     params.llama3_low_freq_factor, params.llama3_high_freq_factor,
                                     params.llama3_original_max_position);
    if (auto it = inv_freq_.find(key); it != inv_freq_.end()) return it->second;
    const std::vector<float> host = rope_inverse_frequencies(params);
    float* device = nullptr;
    SLUICE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(float)));
    SLUICE_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(float),
                                 cudaMemcpyHostToDevice));
    inv_freq_.emplace(key, device);
    return device;
  }

  cuda::AttentionArgs attention_args(const Tensor& q, const Tensor& out, std::int32_t layer,
                                     float scale) const {
    const std::int64_t kv_width = static_cast<std::int64_t>(kv_spec_.num_kv_heads) * kv_spec_.head_dim;
    const std::int64_t layer_elems =
        static_cast<std::int64_t>(kv_spec_.num_blocks) * kv_spec_.block_size_tokens * kv_width;
    auto* k_cache = static_cast<std::uint16_t*>(kv_cache_) + 2 * layer * layer_elems;
    cuda::AttentionArgs args;
    args.q = q.data;
    args.out = out.data;
    args.k_cache = k_cache;
    args.v_cache = k_cache + layer_elems;
    args.num_q_heads = static_cast<std::int32_t>(q.cols() / kv_spec_.head_dim);
    args.num_kv_heads = kv_spec_.num_kv_heads;
    args.head_dim = kv_spec_.head_dim;
    args.block_size_tokens = kv_spec_.block_size_tokens;
    args.scale = scale;
    return args;
  }

  // --- CUDA graphs for decode steps ---
  // A step whose sequences all run one row is captured once per (batch size,
  // context bucket, sample count) and replayed after: the ops then only check
  // shapes and hand out the same scratch addresses, and the graph runs at
  // sample() (or at the next begin_step). Everything a graph reads that
  // changes per step lives in device buffers at fixed addresses; launch
  // shapes depend on the bucket only (the split-KV plan takes the bucket as
  // its longest context).
  enum class Mode { eager, capturing, replaying };
  struct GraphKey {
    std::int32_t num_rows, context_bucket, table_blocks_bucket, num_sample_rows;
    std::uint64_t scratch_generation, metadata_generation;
    auto operator<=>(const GraphKey&) const = default;
  };
  bool replaying() const { return mode_ == Mode::replaying; }
  // Whether an op launches its kernels (not while replaying: the graph has
  // them); first launches a deferred RoPE, whose q and k the op may read.
  bool launching() {
    if (replaying()) return false;
    flush_deferred_rope();
    return true;
  }

  // A decode step under capture defers its RoPE to the attention op that
  // follows it, which launches it fused with the KV page write: one kernel
  // instead of two, ~3-4 us a layer each at batch 1. Any other op launches it
  // first (as does the end of the capture). Eager steps (prefill, the tests
  // that compare each op with the CPU) keep the separate kernels.
  // SLUICE_ROPE_KV_FUSED=0 turns the fusion off.
  struct DeferredRope {
    void* q;
    cuda::Dt q_dt;
    void* k;
    std::int32_t num_q_heads, num_kv_heads, head_dim;
    const float* inv_freq;
  };
  void flush_deferred_rope() {
    if (!deferred_rope_) return;
    const DeferredRope r = *deferred_rope_;
    deferred_rope_.reset();
    cuda::launch_rope(view_, r.q, r.q_dt, r.num_q_heads, r.k, dt_of(DType::bf16), r.num_kv_heads, r.head_dim,
                      r.inv_freq, stream_);
  }
  static bool rope_kv_fusion_setting() {
    const char* env = std::getenv("SLUICE_ROPE_KV_FUSED");
    return env == nullptr || env[0] != '0';
  }

  std::optional<GraphKey> graph_key(const StepLayout& layout) const {
    if (!options_.use_cuda_graphs || kv_cache_ == nullptr || layout.sequences.empty()) return std::nullopt;
    std::int32_t longest = 0, longest_table = 0;
    for (const SequenceLayout& seq : layout.sequences) {
      if (seq.num_rows != 1) return std::nullopt;
      longest = std::max(longest, seq.num_computed_tokens + 1);
      longest_table = std::max(longest_table, static_cast<std::int32_t>(seq.block_table.size()));
    }
    // Eighth octaves above 4096 (4097 -> 4608, 8193 -> 9216): the split-KV
    // plan is made for the bucket.
    // Power-of-two buckets by default: eighth-octave buckets (SLUICE_GRAPH_BUCKETS=eighth,
    // below) gave batch 64 at 8k two even splits instead of one 8192-key and
    // one 1-key split, but measured 2.6% slower (2,289 vs 2,349 tok/s, run 8).
    const char* bucket_env = std::getenv("SLUICE_GRAPH_BUCKETS");
    const bool pow2_buckets = bucket_env == nullptr || std::string_view(bucket_env) != "eighth";
    auto bucket_of = [pow2_buckets](std::int32_t n, std::int32_t least) {
      if (n <= least) return least;
      if (pow2_buckets) {
        std::int32_t bucket = least;
        while (bucket < n) bucket *= 2;
        return bucket;
      }
      std::int32_t octave = least;
      while (octave * 2 <= n) octave *= 2;
      const std::int32_t step = std::min(octave, std::max<std::int32_t>(512, octave / 8));
      return (n + step - 1) / step * step;
    };
    return GraphKey{layout.num_rows(), bucket_of(longest, 256), bucket_of(longest_table, 16),
                    static_cast<std::int32_t>(layout.sample_rows.size()), scratch_.generation(),
                    metadata_generation_};
  }

  // Ends a capture (instantiating and keeping the graph) or a replay by
  // launching the step's graph; a no-op for eager steps.
  void finish_step_graph() {
    if (mode_ == Mode::capturing) {
      flush_deferred_rope();
      cudaGraph_t graph = nullptr;
      SLUICE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
      cudaGraphExec_t exec = nullptr;
      SLUICE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      SLUICE_CUDA_CHECK(cudaGraphDestroy(graph));
      // Keys made under older arena or metadata buffers can never match again.
      for (auto it = graphs_.begin(); it != graphs_.end();) {
        if (it->first.scratch_generation != capture_key_.scratch_generation ||
            it->first.metadata_generation != capture_key_.metadata_generation) {
          SLUICE_CUDA_CHECK(cudaGraphExecDestroy(it->second));
          it = graphs_.erase(it);
        } else {
          ++it;
        }
      }
      graphs_.emplace(capture_key_, exec);
      replay_ = exec;
    }
    if (mode_ != Mode::eager) SLUICE_CUDA_CHECK(cudaGraphLaunch(replay_, stream_));
    mode_ = Mode::eager;
  }

  void clear_graphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  void upload_layout(const StepLayout& layout, const std::optional<GraphKey>& graph);

  CudaOpsOptions options_;
  cudaStream_t stream_;
  ScratchArena scratch_;
  cuda::LtGemm gemm_;
  std::vector<void*> weights_;
  std::map<std::tuple<std::int32_t, float, float, float, float, std::int32_t>, float*> inv_freq_;
  void* kv_cache_ = nullptr;  // per layer: K then V, each [num_blocks, block_size, kv_heads, head_dim]
  KvCacheSpec kv_spec_;

  PinnedBuffer staging_;
  PinnedBuffer step_host_;
  void* step_device_ = nullptr;
  std::int64_t step_device_bytes_ = 0;
  cudaEvent_t upload_done_ = nullptr;
  cuda::StepDeviceView view_;
  int num_sms_ = 0;
  std::int32_t attention_q_heads_ = 0;  // the model's, known from its first attention call
  std::uint64_t metadata_generation_ = 0;  // bumped when step_device_ moves

  Mode mode_ = Mode::eager;
  bool fuse_rope_kv_write_ = rope_kv_fusion_setting();
  std::optional<DeferredRope> deferred_rope_;
  GraphKey capture_key_{};
  cudaGraphExec_t replay_ = nullptr;
  std::map<GraphKey, cudaGraphExec_t> graphs_;

  PinnedBuffer sample_host_;
  PinnedBuffer sample_upload_host_;
  DeviceSamplePack sample_pack_;
  void* sample_device_ = nullptr;
  std::int64_t sample_device_bytes_ = 0;
};

// Packs the step's integer metadata into one pinned buffer and sends it with a
// single copy; the view points into the device copy.
void CudaOps::upload_layout(const StepLayout& layout, const std::optional<GraphKey>& graph) {
  const auto num_rows = layout.num_rows();
  const auto num_seqs = static_cast<std::int32_t>(layout.sequences.size());
  std::int64_t table_len = 0;
  for (const auto& s : layout.sequences) table_len += static_cast<std::int64_t>(s.block_table.size());
  const bool tensor_core_prefill =
      kv_spec_.head_dim > 0 && cuda::prefill_kernel_supports(kv_spec_.head_dim);

  std::vector<PrefillTile> tiles;
  std::vector<std::int32_t> split_rows;
  std::int32_t max_split_kv = 0;
  for (std::int32_t s = 0; s < num_seqs; ++s) {
    const SequenceLayout& seq = layout.sequences[s];
    if (tensor_core_prefill && seq.num_rows > 1) {
      for (std::int32_t r = 0; r < seq.num_rows; r += cuda::kPrefillTileRows)
        tiles.push_back({s, r, seq.num_computed_tokens + r,
                         seq.num_computed_tokens + std::min(seq.num_rows, r + cuda::kPrefillTileRows)});
    } else {
      for (std::int32_t r = 0; r < seq.num_rows; ++r) split_rows.push_back(seq.row_begin + r);
      if (seq.num_rows > 0)
        max_split_kv = std::max(max_split_kv, seq.num_computed_tokens + seq.num_rows);
    }
  }
  // Longest key ranges first: the causal tail of a long prompt finishes last otherwise.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const PrefillTile& a, const PrefillTile& b) { return a.kv_end > b.kv_end; });
  // Too few tiles to fill the GPU (a short chunk over a long cached prefix):
  // tiles with a long prefix become pieces over parts of their keys.
  PrefillSplitPlan split_plan;
  if (!std::getenv("SLUICE_PREFILL_SPLIT_OFF"))
    split_plan = plan_prefill_split(tiles, attention_q_heads_ > 0 ? attention_q_heads_ : kv_spec_.num_kv_heads,
                                    num_sms_);
  const std::vector<std::array<std::int32_t, 4>>& pieces = split_plan.pieces;
  const auto num_tiles = static_cast<std::int64_t>(tiles.size());
  const auto num_sample = static_cast<std::int64_t>(layout.sample_rows.size());
  const auto num_split = static_cast<std::int64_t>(split_rows.size());
  const auto num_pieces = static_cast<std::int64_t>(pieces.size());
  // Section sizes, each rounded to 4 ints (16 bytes).
  // Section capacities; under a graph they depend on the key only, so every
  // replay finds its sections at the captured addresses.
  const std::int64_t table_capacity =
      graph ? static_cast<std::int64_t>(num_seqs) * graph->table_blocks_bucket : table_len;
  SLUICE_CHECK_LE(table_len, table_capacity);
  const std::array<std::int64_t, 12> sizes = {num_rows, num_rows, num_rows, num_seqs, num_seqs,
                                              num_seqs, num_seqs, table_capacity, num_sample,
                                              2 * num_tiles, num_split, 4 * num_pieces};
  std::array<std::int64_t, 12> offsets{};
  std::int64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = total;
    total += align_up(sizes[i], 4);
  }
  total = std::max<std::int64_t>(total, 4);
  const std::int64_t bytes = total * 4;

  // The previous step's copy must be done before the pinned buffer is rewritten.
  SLUICE_CUDA_CHECK(cudaEventSynchronize(upload_done_));
  auto* host = static_cast<std::int32_t*>(step_host_.ensure(bytes));
  if (bytes > step_device_bytes_) {
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SLUICE_CUDA_CHECK(cudaFree(step_device_));
    step_device_bytes_ = std::max(bytes, 2 * step_device_bytes_);
    SLUICE_CUDA_CHECK(cudaMalloc(&step_device_, static_cast<std::size_t>(step_device_bytes_)));
    ++metadata_generation_;
  }
  std::int32_t* h[12];
  for (std::size_t i = 0; i < sizes.size(); ++i) h[i] = host + offsets[i];
  std::copy(layout.token_ids.begin(), layout.token_ids.end(), h[0]);
  std::copy(layout.positions.begin(), layout.positions.end(), h[1]);
  std::int64_t table_at = 0;
  for (std::int32_t s = 0; s < num_seqs; ++s) {
    const SequenceLayout& seq = layout.sequences[s];
    for (std::int32_t r = 0; r < seq.num_rows; ++r) h[2][seq.row_begin + r] = s;
    h[3][s] = seq.row_begin;
    h[4][s] = seq.num_rows;
    h[5][s] = seq.num_computed_tokens;
    h[6][s] = static_cast<std::int32_t>(table_at);
    std::copy(seq.block_table.begin(), seq.block_table.end(), h[7] + table_at);
    table_at += static_cast<std::int64_t>(seq.block_table.size());
  }
  std::copy(layout.sample_rows.begin(), layout.sample_rows.end(), h[8]);
  for (std::int64_t t = 0; t < num_tiles; ++t) {
    h[9][2 * t] = tiles[t].seq;
    h[9][2 * t + 1] = tiles[t].row;
  }
  std::copy(split_rows.begin(), split_rows.end(), h[10]);
  for (std::int64_t i = 0; i < num_pieces; ++i) std::copy(pieces[i].begin(), pieces[i].end(), h[11] + 4 * i);
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(step_device_, host, static_cast<std::size_t>(bytes),
                                    cudaMemcpyHostToDevice, stream_));
  SLUICE_CUDA_CHECK(cudaEventRecord(upload_done_, stream_));

  const auto* d = static_cast<const std::int32_t*>(step_device_);
  view_ = cuda::StepDeviceView{};
  view_.token_ids = d + offsets[0];
  view_.positions = d + offsets[1];
  view_.row_sequence = d + offsets[2];
  view_.seq_row_begin = d + offsets[3];
  view_.seq_num_rows = d + offsets[4];
  view_.seq_num_computed = d + offsets[5];
  view_.seq_block_offset = d + offsets[6];
  view_.block_tables = d + offsets[7];
  view_.sample_rows = d + offsets[8];
  view_.prefill_tiles = d + offsets[9];
  view_.split_rows = d + offsets[10];
  view_.prefill_split_pieces = d + offsets[11];
  view_.num_prefill_split_pieces = static_cast<std::int32_t>(num_pieces);
  view_.prefill_split_pieces_per_tile = split_plan.pieces_per_tile;
  view_.num_rows = num_rows;
  view_.num_sequences = num_seqs;
  view_.num_sample_rows = static_cast<std::int32_t>(num_sample);
  view_.num_prefill_tiles = static_cast<std::int32_t>(num_tiles);
  view_.num_split_rows = static_cast<std::int32_t>(num_split);
  view_.max_split_kv_tokens = graph ? graph->context_bucket : max_split_kv;
}

// Plain greedy rows are decided by the argmax kernel (12 bytes back a row).
// Every other row but those returning logits goes through the device sampler
// (kernels/sampling_topk.cu: 172 bytes back a row), which chooses the token
// the reference sampler does (tests/cuda/sampling_test.cpp). Rows returning
// logits or asking for more than kMaxDeviceTopLogprobs top logprobs, and
// every non-greedy row with device sampling off, come back as f32 and go
// through the reference sampler on the host.
std::vector<SampleResult> CudaOps::sample(const Tensor& logits,
                                          std::span<const SampleRequest> requests) {
  const auto rows = static_cast<std::int32_t>(logits.rows());
  const std::int64_t vocab = logits.cols();
  SLUICE_CHECK_EQ(static_cast<std::size_t>(rows), requests.size());
  std::vector<SampleResult> results(requests.size());
  finish_step_graph();
  if (rows == 0) return results;
  const bool device_sampling = cuda::device_sampling_enabled();
  std::vector<std::int32_t> device_rows, host_rows;
  sample_pack_.clear();
  for (std::int32_t r = 0; r < rows; ++r) {
    const SampleRequest& req = requests[r];
    const bool plain_greedy = req.params.is_greedy() && !req.params.has_penalties() &&
                              req.params.num_top_logprobs == 0 && !req.return_logits &&
                              req.allowed_tokens.empty();
    if (plain_greedy) continue;
    if (device_sampling && !req.return_logits &&
        req.params.num_top_logprobs <= cuda::kMaxDeviceTopLogprobs) {
      device_rows.push_back(r);
      sample_pack_.add(req, r, vocab);
    } else {
      host_rows.push_back(r);
    }
  }
  const auto num_device = static_cast<std::int64_t>(device_rows.size());
  // One allocation: what comes back (greedy results, device results, f32 rows
  // for the host), then what the device sampler reads and its workspace.
  const std::int64_t greedy_bytes = align_up(rows * 3 * 4LL, kAlignBytes);
  const std::int64_t results_bytes =
      align_up(num_device * static_cast<std::int64_t>(sizeof(cuda::DeviceSampleResult)), kAlignBytes);
  const std::int64_t host_rows_bytes = static_cast<std::int64_t>(host_rows.size()) * vocab * 4;
  const std::int64_t readback_bytes = greedy_bytes + results_bytes + host_rows_bytes;
  const std::int64_t params_bytes = align_up(
      num_device * static_cast<std::int64_t>(sizeof(cuda::DeviceSampleRow)), kAlignBytes);
  const std::int64_t penalty_bytes = align_up(
      static_cast<std::int64_t>(sample_pack_.penalties.size() * sizeof(cuda::DevicePenaltyEntry)), kAlignBytes);
  const std::int64_t mask_bytes = align_up(
      static_cast<std::int64_t>(sample_pack_.mask_words.size() * sizeof(std::uint64_t)), kAlignBytes);
  const std::int64_t upload_bytes = params_bytes + penalty_bytes + mask_bytes;
  const std::int64_t bytes = align_up(readback_bytes, kAlignBytes) + upload_bytes +
                            num_device * cuda::sample_workspace_row_floats(vocab) * 4;
  if (bytes > sample_device_bytes_) {
    SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SLUICE_CUDA_CHECK(cudaFree(sample_device_));
    sample_device_bytes_ = std::max(bytes, 2 * sample_device_bytes_);
    SLUICE_CUDA_CHECK(cudaMalloc(&sample_device_, static_cast<std::size_t>(sample_device_bytes_)));
  }
  auto* device = static_cast<std::byte*>(sample_device_);
  auto* d_token = reinterpret_cast<std::int32_t*>(device);
  auto* d_stats = reinterpret_cast<float*>(d_token + rows);
  auto* d_results = reinterpret_cast<cuda::DeviceSampleResult*>(device + greedy_bytes);
  auto* d_rows = reinterpret_cast<float*>(device + greedy_bytes + results_bytes);
  std::byte* d_upload = device + align_up(readback_bytes, kAlignBytes);
  cuda::launch_argmax_lse(logits.data, dt_of(logits.dtype), rows, vocab, d_token, d_stats, stream_);
  if (num_device > 0) {
    auto* upload = static_cast<std::byte*>(sample_upload_host_.ensure(upload_bytes));
    std::memcpy(upload, sample_pack_.rows.data(), sample_pack_.rows.size() * sizeof(cuda::DeviceSampleRow));
    if (!sample_pack_.penalties.empty())
      std::memcpy(upload + params_bytes, sample_pack_.penalties.data(),
                  sample_pack_.penalties.size() * sizeof(cuda::DevicePenaltyEntry));
    if (!sample_pack_.mask_words.empty())
      std::memcpy(upload + params_bytes + penalty_bytes, sample_pack_.mask_words.data(),
                  sample_pack_.mask_words.size() * sizeof(std::uint64_t));
    SLUICE_CUDA_CHECK(cudaMemcpyAsync(d_upload, upload, static_cast<std::size_t>(upload_bytes),
                                      cudaMemcpyHostToDevice, stream_));
    cuda::launch_sample_rows(
        {.logits = logits.data,
         .dt = dt_of(logits.dtype),
         .vocab = vocab,
         .rows = reinterpret_cast<const cuda::DeviceSampleRow*>(d_upload),
         .num_rows = static_cast<std::int32_t>(num_device),
         .penalties = reinterpret_cast<const cuda::DevicePenaltyEntry*>(d_upload + params_bytes),
         .mask_words = reinterpret_cast<const std::uint64_t*>(d_upload + params_bytes + penalty_bytes),
         .workspace = reinterpret_cast<float*>(d_upload + upload_bytes),
         .out = d_results},
        stream_);
  }
  const std::size_t elem = dtype_size_bytes(logits.dtype);
  for (std::size_t i = 0; i < host_rows.size(); ++i)
    cuda::launch_to_f32(static_cast<const std::byte*>(logits.data) + host_rows[i] * vocab * elem,
                        dt_of(logits.dtype), vocab, d_rows + static_cast<std::int64_t>(i) * vocab,
                        stream_);
  auto* host = static_cast<std::byte*>(sample_host_.ensure(readback_bytes));
  SLUICE_CUDA_CHECK(cudaMemcpyAsync(host, sample_device_, static_cast<std::size_t>(readback_bytes),
                                    cudaMemcpyDeviceToHost, stream_));
  SLUICE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const auto* h_token = reinterpret_cast<const std::int32_t*>(host);
  const auto* h_stats = reinterpret_cast<const float*>(h_token + rows);
  const auto* h_results = reinterpret_cast<const cuda::DeviceSampleResult*>(host + greedy_bytes);
  const auto* h_rows = reinterpret_cast<const float*>(host + greedy_bytes + results_bytes);
  for (std::int32_t r = 0; r < rows; ++r) {
    results[r].token = h_token[r];
    results[r].logprob = h_stats[2 * r] - h_stats[2 * r + 1];
  }
  for (std::size_t i = 0; i < device_rows.size(); ++i) {
    const cuda::DeviceSampleResult& d = h_results[i];
    SampleResult& result = results[device_rows[i]];
    result.token = d.token;
    result.logprob = d.logprob;
    for (std::int32_t j = 0; j < d.num_top_logprobs; ++j)
      result.top_logprobs.push_back({d.top_tokens[j], d.top_logprobs[j]});
  }
  for (std::size_t i = 0; i < host_rows.size(); ++i) {
    const std::int32_t r = host_rows[i];
    results[r] = sample_logits(
        std::span<const float>(h_rows + static_cast<std::int64_t>(i) * vocab,
                               static_cast<std::size_t>(vocab)),
        requests[r]);
  }
  return results;
}

}  // namespace

Result<std::unique_ptr<Ops>> make_cuda_ops(const CudaOpsOptions& options) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Error{"CUDA backend: no CUDA device is visible"};
  }
  if (options.device_index < 0 || options.device_index >= count)
    return Error{fmt::format("CUDA backend: device {} does not exist ({} visible)",
                             options.device_index, count)};
  SLUICE_CUDA_CHECK(cudaSetDevice(options.device_index));
  cudaDeviceProp prop{};
  SLUICE_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device_index));
  if (prop.major < 9)
    return Error{fmt::format("CUDA backend: {} is compute capability {}.{}; sluice is built for "
                             "sm_90a (H100/H200)",
                             prop.name, prop.major, prop.minor)};
  cudaStream_t stream = nullptr;
  SLUICE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<Ops>(std::make_unique<CudaOps>(options, stream));
}

Result<Tensor> cuda_random_weight(Ops& ops, Shape shape, DType dtype, std::uint64_t seed,
                                  float scale) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_random_weight: not a CUDA Ops"};
  return cuda_ops->random_weight(shape, dtype, seed, scale);
}

Status cuda_fill_kv_cache_random(Ops& ops, std::uint64_t seed) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (cuda_ops == nullptr) return Error{"cuda_fill_kv_cache_random: not a CUDA Ops"};
  return cuda_ops->fill_kv_cache_random(seed);
}

}  // namespace sluice
