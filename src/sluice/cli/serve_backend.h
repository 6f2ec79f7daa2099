// The backend and cost model `sluice serve` runs, by --device:
//   cpu   the reference ModelRunner on CpuOps; no cost model (the engine's
//         token-count fallback; max_step_ms is loose on a CPU anyway);
//   cuda  ModelRunner on CudaOps, the KV pool sized by --gpu-memory-utilization
//         after the weights are uploaded, and the roofline cost model of the
//         model directory on an H200 so prefill chunks are sized by time;
//   sim   the sim module's SimBackend, paced to wall clock (serve_sim_backend.h),
//         with the same roofline model as its cost model, for one GPU or an
//         N-GPU launch (--tensor-parallel-size, --enable-expert-parallel); the
//         KV cache from the memory plan (as `sluice plan` computes it) unless
//         --kv-cache-memory sets it, and a model that does not fit is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/backend/backend.h"
#include "sluice/backend/cuda/cuda_options.h"
#include "sluice/common/result.h"
#include "sluice/model/kv_cache_dtype.h"
#include "sluice/sched/cost_model.h"
#include "sluice/tokenizer/tokenizer.h"

namespace sluice::cli {

struct ServeBackendOptions {
  std::string device = "cpu";  // cpu | cuda | sim
  std::string model_dir;
  std::int32_t block_size_tokens = 16;
  std::int32_t max_model_len_tokens = 0;       // 0 = the model's
  std::int32_t max_num_seqs = 64;              // cuda: sizes the activation reserve
  std::int32_t max_num_batched_tokens = 8192;  // cuda: sizes the activation reserve
  std::optional<std::int64_t> kv_cache_memory_bytes;  // cpu (default 1 GiB); sim (default: the memory plan's)
  double gpu_memory_utilization = 0.9;                // cuda, sim
  std::int32_t tensor_parallel_size = 1;              // cpu (ranks as threads), sim; cuda: 1
  bool enable_expert_parallel = false;                // cpu, sim: routed experts over the TP ranks
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;   // --kv-cache-dtype (the model, or the sim profile, refuses what it lacks)
  CudaOptions cuda;                                // cuda: from the --cuda-* flags
  int num_threads = 0;                             // cpu
  std::string sim_profile;  // sim: a builtin profile name; empty = from the model directory
  double sim_speed = 1.0;   // sim: predicted / wall time; 0 = no pacing
  std::int32_t sim_eos_every = 0;
  bool show_progress = false;
};

struct ServeBackend {
  std::unique_ptr<Backend> backend;
  std::shared_ptr<const CostModel> cost_model;  // nullptr: the engine's token-count fallback
  std::string cost_model_description;           // for the start-up log
};

// --decode-lane auto's SMs on --device cuda: the fewest on which the model
// directory's chats' decode step, priced by the roofline model of one H200
// as sluice's kernels run (sim::fewest_decode_lane_sms), takes at most 0.9 of
// `pace_ms` (num_sms 0 when even half the GPU cannot, or this build has no
// CUDA); and the context up to which 8 chats on them still get 20 tok/s
// (sim::decode_lane_chat_context), for the start-up log.
struct AutoDecodeLane {
  std::int32_t num_sms = 0;
  std::int32_t chats_context_at_20_tok_s = 0;
};
Result<AutoDecodeLane> auto_decode_lane(const std::string& model_dir, double pace_ms, std::int32_t max_context);

// `tokenizer` and `eos_token_ids` are the model directory's (the sim emits
// only ids the tokenizer can decode).
Result<ServeBackend> make_serve_backend(const ServeBackendOptions& options, const Tokenizer& tokenizer,
                                        const std::vector<TokenId>& eos_token_ids);

}  // namespace sluice::cli
