// How the KV cache stores its values (--kv-cache-dtype): the model's dtype,
// or FP8 where the architecture has an FP8 layout (DeepSeek-V4 on CUDA:
// fp8_ds_mla records; the simulator's profiles that price one).
#pragma once

namespace sluice {

enum class KvCacheDtype { kAuto, kFp8 };

}  // namespace sluice
