// CpuCommunicatorGroup: a Communicator for `size` ranks that are threads of
// one process. The ranks share a table of their buffers; a collective is
// publish pointers -> barrier -> each rank reads the others' buffers ->
// barrier. The barrier wakes on abort: a rank that fails (an error, an
// exception caught at its thread's boundary) calls abort() and every rank
// waiting, or arriving later, gets that error instead of hanging.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sluice/dist/communicator.h"

namespace sluice {

class CpuCommunicatorGroup {
 public:
  explicit CpuCommunicatorGroup(std::int32_t size);
  ~CpuCommunicatorGroup();
  CpuCommunicatorGroup(const CpuCommunicatorGroup&) = delete;
  CpuCommunicatorGroup& operator=(const CpuCommunicatorGroup&) = delete;

  std::int32_t size() const;
  // The communicator of `rank`, owned by the group; one thread uses it.
  Communicator& rank(std::int32_t rank);
  // Why the group ended (the first abort), or nothing while it runs.
  std::optional<std::string> abort_reason() const;

  struct Shared;  // the barrier and the published buffers

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

}  // namespace sluice
