// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! InitRequest: how an engine joins a transfer group, in the engines' own terms (no JSON): the
//! group (GroupInfo: world size and rendezvous), where the workers start, the packing defaults of
//! every update, and optionally the trainer ranks and a plan announced once. The engines'
//! init_transfer_engine and trainer_init take it; an adapter converts its own init description to
//! it (vLLM's NcclInitInfo / M2NInitInfo: <weightsync/vllm.hpp>, see engine/adapter.hpp).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

struct InitRequest {
  //! The group: world size and one rendezvous mode.
  GroupInfo group;
  //! The first worker's rank (ranks below it are the trainer's).
  int rank_offset = 1;
  //! The packing of every update that does not override it.
  Packing packing;
  //! M, the trainer ranks, when the init says it (vLLM's M2N: rank_offset); 0: not said (each
  //! update, or the worker's Options::trainer_ranks, does).
  int trainer_ranks = 0;
  //! Every tensor an update may name, announced once (vLLM's M2N init info): an update of names
  //! only is resolved against it (plan_update). Absent: every update carries its tensors.
  std::optional<UpdateRequest> plan;

  //! @throws config_error naming the first field at fault.
  void validate() const {
    if (group.world_size < 1)
      throw config_error("world_size", detail::cat("must be >= 1, got ", group.world_size));
    if (rank_offset < 0)
      throw config_error("rank_offset", detail::cat("must be >= 0, got ", rank_offset));
    if (rank_offset >= group.world_size)
      throw config_error("rank_offset", detail::cat("must be < world_size (", group.world_size,
                                                    "), got ", rank_offset));
    group.validate();
    packing.validate();
    if (trainer_ranks < 0 || trainer_ranks > rank_offset)
      throw config_error("rank_offset", detail::cat(trainer_ranks,
                                                    " trainer ranks need "
                                                    "rank_offset >= ",
                                                    trainer_ranks, ", got ", rank_offset));
    if (plan) plan->validate();
  }
  friend bool operator==(const InitRequest&, const InitRequest&) = default;
};

//! The update of the tensors `names` (in that order) of an announced `plan`: their metadata and
//! specs, the plan's sharding, trainer ranks and packing.
//! @throws config_error("names[k]") for a name the plan does not have.
inline UpdateRequest plan_update(const UpdateRequest& plan, const std::vector<std::string>& names) {
  UpdateRequest out = plan;
  out.metas.clear();
  out.shards.clear();
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < plan.metas.size(); ++i) index.emplace(plan.metas[i].name, i);
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto it = index.find(names[k]);
    if (it == index.end())
      throw config_error(detail::cat("names[", k, "]"),
                         "tensor '" + names[k] +
                             "' was not declared in the init info; an update of names only "
                             "names tensors the init info announced");
    out.metas.push_back(plan.metas[it->second]);
    if (!plan.shards.empty()) out.shards.push_back(plan.shards[it->second]);
  }
  return out;
}

}  // namespace weightsync
