#include "sluice/sim/parallelism.h"

#include <string>

namespace sluice::sim {

Status validate(const Parallelism& par, const ModelProfile& profile) {
  const auto fail = [](std::string message) -> Status { return Error{std::move(message)}; };
  if (par.num_gpus < 1) return fail("--gpus must be >= 1, got " + std::to_string(par.num_gpus));
  if (par.tensor_parallel < 1 || par.num_gpus % par.tensor_parallel != 0) {
    return fail("--tensor-parallel-size " + std::to_string(par.tensor_parallel) +
                " must divide --gpus " + std::to_string(par.num_gpus));
  }
  if (profile.max_tensor_parallel > 0 && par.tensor_parallel > profile.max_tensor_parallel) {
    return fail("--tensor-parallel-size " + std::to_string(par.tensor_parallel) + " exceeds " +
                std::to_string(profile.max_tensor_parallel) + ", the most " + profile.name +
                "'s attention can be split into");
  }
  if (profile.num_attention_heads % par.tensor_parallel != 0) {
    return fail("--tensor-parallel-size " + std::to_string(par.tensor_parallel) + " does not divide " +
                profile.name + "'s " + std::to_string(profile.num_attention_heads) + " attention heads");
  }
  if (par.expert_parallel < 1) return fail("expert parallel size must be >= 1");
  if (par.expert_parallel > 1) {
    if (!profile.is_moe()) {
      return fail("--expert-parallel: " + profile.name + " is a dense model, it has no experts");
    }
    if (par.num_gpus % par.expert_parallel != 0) {
      return fail("expert parallel size " + std::to_string(par.expert_parallel) + " must divide --gpus " +
                  std::to_string(par.num_gpus));
    }
    if (profile.num_routed_experts() % par.expert_parallel != 0) {
      return fail("expert parallel size " + std::to_string(par.expert_parallel) + " does not divide " +
                  std::to_string(profile.num_routed_experts()) + " experts");
    }
  }
  return Ok{};
}

}  // namespace sluice::sim
