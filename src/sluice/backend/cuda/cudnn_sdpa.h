// Prefill attention through cuDNN's SDPA (the graph/backend API of
// cudnn_graph.h), the PrefillAttention::cudnn choice of cuda_options.h.
//
// Loading: libcudnn.so.9 is opened with dlopen at the first prefill step that
// asks for it, not linked: a build needs only the headers (CI has them in
// /usr/local/cuda/include), a machine without cuDNN still runs (the caller
// falls back to wgmma_ws with one log line), and the library found is the
// loader's choice, so LD_LIBRARY_PATH picks the version (the GPU machine has
// 9.14 system-wide and 9.19 in torch's tree, ../shared/DEVICE.md).
//
// The graph is the one cudnn-frontend's composite SDPA node lowers to (read
// from its source, not copied): a paged-cache load of K and V (our cache's
// [block, token, kv_head, dim] pages are its [block, kv_head, token, dim]
// container by strides), Q K^T with the seq_len overrides, the scale, the
// padding mask, the bottom-right causal mask (row + seq_len_kv - seq_len_q >=
// col: a chunk over a cached prefix), softmax, and P V. Q and O are packed
// rows ([row, head, dim], ragged offsets per sequence), so no copy is made.
// A step whose sequences all start at position 0 reads K and V from the
// step's own rows (packed, ragged) instead of the pages: 16-token pages cost
// cuDNN 10-20% on whole prompts (S9-C1 against S9-C2, docs/benchmarks.md).
//
// Each step is routed first (cudnn_split_plan.h): one causal call where its
// query tiles fill the GPU; else split over keys, an unmasked call over the
// prefixes' pieces and a causal one over the tails, both writing their rows'
// log-sum-exp, then kernels/sdpa_split_combine.cu; or declined (auto).
//
// Plans are cached by shape class (cudnn_plan_classes.h): the batch padded to
// a power of two with empty entries, the longest chunk and the longest key
// range each rounded up to a power of two (at least 64); the actual lengths
// go in seq_len tensors, so a burst of chunks over growing prefixes reuses a
// few dozen plans. A server builds every class its steps can ask for before
// it serves (build_plans_before_serving), and any other on a thread of its
// own (open()'s background_plans).
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <array>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sluice/backend/cuda/cudnn_plan_classes.h"
#include "sluice/backend/cuda/device_buffer.h"
#include "sluice/backend/ops.h"
#include "sluice/common/result.h"

namespace sluice::cuda {

// One sequence of the step that cuDNN attends: rows [row_begin, row_begin +
// num_rows) of q and out, keys [0, num_keys) through `block_table`.
struct SdpaSequence {
  std::int32_t row_begin = 0, num_rows = 0, num_keys = 0;
  std::span<const BlockId> block_table;
};

// One layer's call: the step's sequences were given to prepare() before.
struct SdpaLayer {
  const void* q = nullptr;  // bf16 [rows, num_q_heads, head_dim_qk]
  void* out = nullptr;      // bf16 [rows, num_q_heads, head_dim_v]
  // The step's K and V rows (bf16 [rows, num_kv_heads, head_dim], after RoPE):
  // read instead of the pages when every sequence starts at position 0.
  const void* k = nullptr;
  const void* v = nullptr;
  const void* k_cache = nullptr;  // bf16 [num_blocks, block_size, num_kv_heads, head_dim_qk]
  const void* v_cache = nullptr;  // bf16 [num_blocks, block_size, num_kv_heads, head_dim_v]
  std::int32_t num_q_heads = 0, num_kv_heads = 0, head_dim_qk = 0, head_dim_v = 0;
  std::int32_t block_size = 0;
  std::int64_t num_blocks = 0;
  float scale = 1.0f;
};

// Why cuDNN would refuse these dims before asking it (empty: none).
std::string cudnn_sdpa_unsupported(std::int32_t num_q_heads, std::int32_t num_kv_heads, std::int32_t head_dim_qk,
                                   std::int32_t head_dim_v, std::int32_t block_size);

// One sequence's K and V as packed rows, not pages (MLA's decompressed
// prefill: a group of heads at a time, cudnn_sdpa.h's caller offsets the
// pointers to the sequence's first row and the group's first head). Strides
// are in elements.
struct SdpaPacked {
  const void* q = nullptr;  // bf16, row r head h at q + r * q_row + h * head_dim_qk
  void* out = nullptr;      // bf16, row r head h at out + r * o_row + h * head_dim_v
  const void* k = nullptr;  // bf16, key j head h at k + j * k_row + h * k_head (head_dim_qk contiguous)
  const void* v = nullptr;  // bf16, key j head h at v + j * v_row + h * v_head (head_dim_v contiguous)
  std::int32_t num_heads = 0, head_dim_qk = 0, head_dim_v = 0;
  std::int64_t q_row = 0, o_row = 0, k_row = 0, k_head = 0, v_row = 0, v_head = 0;
  std::int32_t num_rows = 0, num_keys = 0;  // rows at positions [num_keys - num_rows, num_keys)
  float scale = 1.0f;
};

// The step's shape for prepare(). Row widths are in elements.
struct SdpaStepShape {
  std::int64_t q_row_elems = 0, out_row_elems = 0, kv_row_elems = 0;
  std::int32_t block_size = 0, num_q_heads = 0, num_kv_heads = 0, head_dim_qk = 0, head_dim_v = 0, num_sms = 0;
  std::int64_t num_blocks = 0;  // of the paged K/V cache
  // Whether a step cuDNN cannot fill the GPU with (cudnn_split_plan.h's
  // decline) goes back to the caller (PrefillAttention::automatic), or runs
  // on cuDNN whole anyway (PrefillAttention::cudnn).
  bool may_decline = false;
};

// What build_plans_before_serving did.
struct SdpaServingPlans {
  std::int64_t num_classes = 0;  // the bounds' classes
  std::int64_t num_built = 0, num_refused = 0;
  std::int64_t num_left = 0;  // to the builder thread, while serving
  double build_s = 0.0;
  std::string first_refusal;
};

class CudnnSdpa {
 public:
  // Opens libcudnn.so.9 and makes a handle on `stream`; an error says why not.
  // `background_plans`: a missing plan is built on a thread of its own (with
  // a handle of its own: a cuDNN handle is not shared between threads), and
  // prepare() declines the steps that need it until it is ready, so no step
  // waits 45-110 ms for a plan (the first ~1.2 s: 78 plans in S10-lead-2's
  // burst). Otherwise plans are built in line, where first asked for.
  static Result<std::unique_ptr<CudnnSdpa>> open(cudaStream_t stream, bool background_plans = false);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // Routes the step (cudnn_split_plan.h) and copies its calls' tensors to the
  // device once; every layer's run() then reads them. false: declined (the
  // route, or a plan still being built), the caller runs the step on its own
  // kernels.
  Result<bool> prepare(std::span<const SdpaSequence> sequences, const SdpaStepShape& shape);
  // Attention of the prepared sequences for one layer, enqueued on the stream.
  Status run(const SdpaLayer& layer);
  // Attention of one sequence over packed K/V, causal bottom-right (no prepare()).
  Status run_packed(const SdpaPacked& packed);

  std::int64_t version() const;   // cudnnGetVersion(), e.g. 91900
  std::int64_t num_runs() const { return num_runs_; }              // layers run
  std::int64_t num_split_runs() const { return num_split_runs_; }  // of them split over keys
  std::int64_t num_plans() const { return static_cast<std::int64_t>(plans_.size()); }
  // Blocks until every plan asked for so far is built or refused (tests).
  void wait_for_plans();
  // Builds the plan of every class the steps within `bounds` can ask for
  // (cudnn_plan_classes.h), the likeliest first: a plan built while serving
  // waits for the whole device (cudnn_plan_classes.h). Needs open()'s
  // background_plans: the builder thread takes them; this blocks up to
  // `max_wait_s`, and the builder makes the rest while serving. One thread:
  // cuDNN compiles a kernel for the first plan of each kind (1.0-1.3 s) and
  // builds the rest in 45-71 ms (S14-lead-2: 288 plans in 24 s).
  Result<SdpaServingPlans> build_plans_before_serving(const SdpaStepShape& shape, const SdpaServingBounds& bounds,
                                                      double max_wait_s);
  // The same for run_packed's calls of these dims (pointers unused; MLA's
  // prefill classes, mla_attention.h). run_packed cannot decline: it takes a
  // plan the builder made, waits for the one it is making, and builds one
  // still queued in line.
  Result<SdpaServingPlans> build_packed_plans_before_serving(std::span<const SdpaPacked> calls, double max_wait_s);

  struct Api;
  struct Plan;

 private:
  CudnnSdpa(std::unique_ptr<Api> api, void* handle, void* build_handle, cudaStream_t stream);
  // One graph's shape class: every dim and stride of its tensors.
  struct GraphSpec {
    std::int64_t paged = 0;  // K/V from pages (else packed rows)
    std::int64_t causal = 1;  // bottom-right causal mask (else padding only)
    std::int64_t stats = 0;   // writes the rows' log-sum-exp
    std::int64_t b = 0, hq = 0, hk = 0, sq = 0, skv = 0, dqk = 0, dv = 0;
    std::int64_t q_row = 0, q_head = 0, o_row = 0, o_head = 0, k_row = 0, k_head = 0, v_row = 0, v_head = 0;
    std::int64_t block_size = 0, num_blocks = 0, table = 0;  // pages only
    std::array<std::int64_t, 21> key() const {
      return {paged, causal, stats, b, hq, hk, sq, skv, dqk, dv, q_row, q_head, o_row, o_head, k_row, k_head,
              v_row, v_head, block_size, num_blocks, table};
    }
  };
  // One call of a step: its graph dims and where its per-entry tensors sit in
  // step_tensors_ (int32 element offsets).
  struct Call {
    std::int64_t b = 0, sq = 0, skv = 0, table = 0;
    bool paged = true, causal = true, stats = false;
    std::int64_t seq_len_q = 0, seq_len_kv = 0, q_offsets = 0, out_offsets = 0, kv_offsets = 0, page_table = 0;
  };
  // One batch entry of a call: rows [q_row, q_row + num_rows) of q (written
  // at out_row of the call's output), keys [key_begin, key_end).
  struct Entry {
    std::int32_t q_row = 0, out_row = 0, num_rows = 0, key_begin = 0, key_end = 0;
    std::span<const BlockId> block_table;
  };
  Call add_call(std::span<const Entry> entries, bool paged, bool causal, bool stats);
  std::int64_t add_section(std::int64_t count);  // int32 elements, 16-byte aligned
  GraphSpec spec_of(const Call& call) const;
  static GraphSpec packed_spec(const SdpaPacked& packed);
  // Queues the specs not yet asked for on the builder thread and waits up to
  // max_wait_s for it to be idle.
  Result<SdpaServingPlans> queue_and_wait(std::span<const GraphSpec> specs, double max_wait_s);
  Status run_call(const Call& call, const SdpaLayer& l, void* out, void* stats);

  // The plan of a shape class; null while the builder thread makes it
  // (`may_defer`; else it is built here, in line).
  Result<const Plan*> plan_for(const GraphSpec& spec, bool may_defer = true);
  Result<std::unique_ptr<Plan>> build_plan(const GraphSpec& spec, void* handle);
  void build_queued_plans();  // the builder thread
  Status execute(const Plan& plan, std::span<const std::int64_t> uids, std::span<void* const> pointers);

  using Key = std::array<std::int64_t, 21>;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;  // cudnnHandle_t
  cudaStream_t stream_ = nullptr;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, std::string> failed_;  // shape classes cuDNN refused, and why

  // Background builds (open()'s background_plans): the queue and results the
  // builder thread shares with the stream's thread, under mutex_.
  void* build_handle_ = nullptr;  // the builder's cudnnHandle_t; null: plans are built in line
  std::thread builder_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_, progress_;  // progress_: after each build
  std::deque<GraphSpec> queue_;
  std::set<Key> asked_;
  std::map<Key, std::unique_ptr<Plan>> built_;
  std::map<Key, std::string> refused_;
  bool building_ = false, stopping_ = false;
  Key building_key_{};  // while building_

  // The prepared step: one whole call, or a split (pieces, tails, combine).
  SdpaStepShape shape_;
  bool prepared_ = false, split_ = false;
  Call whole_, pieces_, tails_;
  std::int64_t combine_rows_ = 0, combine_rows_at_ = 0, piece_row_begin_at_ = 0;
  std::vector<std::int32_t> host_tensors_;
  DeviceBuffer step_tensors_;
  DeviceBuffer partial_out_, piece_lse_, tail_lse_;  // split steps
  DeviceBuffer packed_tensors_;
  std::vector<std::int32_t> packed_host_;
  DeviceBuffer workspace_;
  std::int64_t num_runs_ = 0, num_split_runs_ = 0;
  float scale_ = 1.0f;  // by-value tensors point at these during execute
  float negative_infinity_ = 0.0f;
};

}  // namespace sluice::cuda
