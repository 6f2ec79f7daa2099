// KV block copies between the device pool and the host tier: what the engine
// asks a backend to move and what the backend reports back. Vocabulary shared
// by kv/ (which plans them), engine/ and backend/ (which run them).
#pragma once

#include <cstdint>

#include "sluice/common/ids.h"

namespace sluice {

enum class KvCopyDirection : std::uint8_t {
  kDeviceToHost,  // a demotion (store): the device block is only read
  kHostToDevice,  // a promotion (load): the device block is written
};

// Ids grow from 1 per engine; a backend reports each once.
using KvCopyId = std::uint64_t;

// One block, every layer: device block `device_block` <-> host block `host_block`.
// The engine guarantees no step reads or writes either block against the copy's
// direction until its completion is reported (the blocks stay referenced).
struct KvBlockCopy {
  KvCopyId id = 0;
  KvCopyDirection direction = KvCopyDirection::kDeviceToHost;
  BlockId device_block = 0;
  BlockId host_block = 0;
};

struct KvCopyCompletion {
  KvCopyId id = 0;
  bool ok = true;  // false: the data did not arrive (the engine drops a store, fails a load's request)
};

}  // namespace sluice
