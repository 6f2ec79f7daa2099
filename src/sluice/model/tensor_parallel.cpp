#include "sluice/model/tensor_parallel.h"

namespace sluice {

Status all_reduce(Communicator* comm, const Tensor& x) {
  if (!comm) return Ok{};
  return comm->all_reduce_sum({x.as<float>(), static_cast<std::size_t>(x.numel())});
}

Status embed_tokens(Ops& ops, Communicator* comm, const Tensor& table, TokenId first_token_id, Tensor out) {
  if (!comm) {
    ops.embedding(table, out);
    return Ok{};
  }
  SLUICE_TRY(ops.embedding_shard(table, first_token_id, out));
  return all_reduce(comm, out);
}

Result<Tensor> gather_logits(Ops& ops, Communicator* comm, const Tensor& shard, std::int64_t vocab) {
  if (!comm) return shard;
  // One all-gather per row: each rank's columns of a row are contiguous in
  // the rank-major result, so the row comes out whole and in vocabulary order.
  Tensor logits = ops.scratch({shard.rows(), vocab});
  for (std::int64_t row = 0; row < shard.rows(); ++row) {
    const std::span<const float> send{shard.as<const float>() + row * shard.cols(),
                                      static_cast<std::size_t>(shard.cols())};
    SLUICE_TRY(comm->all_gather(send, {logits.as<float>() + row * logits.cols(), static_cast<std::size_t>(vocab)}));
  }
  return logits;
}

}  // namespace sluice
