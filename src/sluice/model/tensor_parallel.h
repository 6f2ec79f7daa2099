// The collectives a sharded decoder runs between its ops, shared by the
// architectures that split over a Communicator (llama.h, deepseek_v3.h).
// With comm == nullptr (the whole model on one device) each is the plain op,
// or nothing. The CPU communicator reads host f32 activations.
#pragma once

#include "sluice/backend/ops.h"
#include "sluice/dist/communicator.h"

namespace sluice {

// x = sum over ranks of x: the partial sums of a row-parallel projection (or
// of each rank's experts) made whole on every rank.
Status all_reduce(Communicator* comm, const Tensor& x);

// The step's token embeddings into out [rows, hidden]: the whole table, or
// vocab-parallel (`table` holds the rows of ids [first_token_id,
// first_token_id + table.rows()); each rank looks up its rows, zeros
// elsewhere, all-reduced).
Status embed_tokens(Ops& ops, Communicator* comm, const Tensor& table, TokenId first_token_id, Tensor out);

// The rows' logits [samples, vocab] from this rank's vocab-parallel columns
// [samples, vocab / ranks]; the shard itself without a group.
Result<Tensor> gather_logits(Ops& ops, Communicator* comm, const Tensor& shard, std::int64_t vocab);

}  // namespace sluice
