// Communicator: the collectives tensor parallelism needs, over one group of
// `size()` ranks, seen from one rank. CpuCommunicator (cpu_communicator.h)
// implements it with threads in one process, so CI proves sharded
// correctness; an NCCL one will implement it for GPUs (docs/architecture.md,
// "Several devices").
//
// Every rank of the group calls each collective, in the same order, with the
// same element counts; a collective returns once this rank's output is
// complete. Buffers are in the memory the communicator addresses (host memory
// for the CPU one). A collective that fails (a count mismatch, a rank that
// aborted) fails on every rank, and every later collective fails too: a group
// that lost a rank is finished.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "sluice/common/result.h"

namespace sluice {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::int32_t rank() const = 0;
  virtual std::int32_t size() const = 0;

  // data = sum over ranks of data, in place. Every rank sums in rank order, so
  // every rank ends with the same bits.
  virtual Status all_reduce_sum(std::span<float> data) = 0;
  // recv[r * send.size() + i] = rank r's send[i]; recv holds size() * send.size().
  virtual Status all_gather(std::span<const float> send, std::span<float> recv) = 0;
  // recv[i] = sum over ranks r of r's send[rank() * recv.size() + i]; send
  // holds size() * recv.size().
  virtual Status reduce_scatter_sum(std::span<const float> send, std::span<float> recv) = 0;
  // Ends the group: every rank waiting in a collective, now or later, fails
  // with `reason` (which names this rank). Safe from any thread, idempotent
  // (the first reason stays).
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace sluice
