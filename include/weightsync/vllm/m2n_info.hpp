// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! vLLM's sharded-trainer backend `nccl_m2n`: M2NInitInfo (M2NWeightTransferInitInfo, which
//! carries the rendezvous and the whole plan) and M2NUpdateInfo (M2NWeightTransferUpdateInfo,
//! names only), and their conversions to the engines' InitRequest (with the plan) and
//! UpdateRequest (the named tensors of that plan): engine/adapter.hpp. Their JSON is in
//! vllm/json.hpp; this header needs no JSON library.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/vllm/init_info.hpp"
#include "weightsync/vllm/update_info.hpp"

namespace weightsync {

//! vLLM's M2NWeightTransferUpdateInfo: one update of an engine initialized with an M2NInitInfo
//! names the tensors it carries, in the order the trainer sends them (any subset of the init
//! info's names, any order); dtypes, shapes and placements come from the init info
//! (M2NInitInfo::update).
struct M2NUpdateInfo {
  std::vector<std::string> names;
  //! vLLM's base-class field (newer vLLM versions), as in NcclUpdateInfo: carried, not interpreted.
  bool is_checkpoint_format = true;

  friend bool operator==(const M2NUpdateInfo&, const M2NUpdateInfo&) = default;
};

//! vLLM's M2NWeightTransferInitInfo (backend `nccl_m2n`, vllm/distributed/weight_transfer/
//! m2n_engine.py): the rendezvous and the whole plan, sent once; each update then only names its
//! tensors (M2NUpdateInfo). Trainer ranks are 0..rank_offset-1, laid out as the mesh
//! `src_mesh_dims` [a, b] (rank i * b + j; a * b == rank_offset), workers rank_offset..world_size-1
//! as `dst_mesh_dims` [c, d] (c * d == world_size - rank_offset). Per tensor, `src_placements` is
//! null (replicated) or one code per mesh axis (-1 replicate, d >= 0 shard tensor dim d over that
//! axis; exactly one axis shards, and evenly, as vLLM checks).
//!
//! How this library moves it: each tensor becomes a ShardSpec (shard_spec_from_m2n: the sharding
//! axis's ranks at index 0 of the other axis send; a replicated tensor is sent whole by trainer
//! rank 0) and a sharded transfer runs with the packing defaults of NcclInitInfo. Every worker
//! receives FULL tensors: dst_mesh_dims is checked and carried, not used to split what a worker
//! receives (vLLM's workers may reshard straight into their TP shard). max_cta (m2n's kernel
//! setting) is carried, not interpreted; dtypes and tensor ranks are not limited to m2n's.
struct M2NInitInfo {
  std::optional<std::string> master_address;
  std::optional<int> master_port;
  int rank_offset = 1;  //!< the first worker rank = the number of trainer ranks (M)
  int world_size = 2;   //!< trainer ranks + workers
  std::vector<std::int64_t> src_mesh_dims;
  std::vector<std::int64_t> dst_mesh_dims;
  std::vector<std::string> names;
  std::vector<std::string> dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::optional<std::vector<std::int64_t>>> src_placements;
  std::optional<std::string> nccl_unique_id_b64;
  std::optional<int> max_cta;

  //! How to join the group: the rendezvous fields, NcclInitInfo's packing defaults.
  NcclInitInfo rendezvous() const {
    NcclInitInfo r;
    r.master_address = master_address;
    r.master_port = master_port;
    r.rank_offset = rank_offset;
    r.world_size = world_size;
    r.nccl_unique_id_b64 = nccl_unique_id_b64;
    return r;
  }

  //! The update info of every tensor in declared order (names, dtype names, shapes, and the
  //! placements as src_mesh_dims / src_placements).
  NcclUpdateInfo plan() const {
    NcclUpdateInfo u;
    u.names = names;
    u.dtype_names = dtype_names;
    u.shapes = shapes;
    u.src_mesh_dims = src_mesh_dims;
    u.src_placements = src_placements;
    return u;
  }

  //! The update info of the tensors `u` names, in its order. @throws config_error("names[k]")
  //! for a name the init info did not declare.
  NcclUpdateInfo update(const M2NUpdateInfo& u) const {
    NcclUpdateInfo out;
    if (u.names == names) {
      out = plan();  // every tensor, in declared order: what vLLM's trainer sends each round
    } else {
      std::unordered_map<std::string_view, std::size_t> index;
      for (std::size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
      out.src_mesh_dims = src_mesh_dims;
      out.src_placements.emplace();
      for (std::size_t k = 0; k < u.names.size(); ++k) {
        const auto it = index.find(u.names[k]);
        if (it == index.end())
          throw config_error(detail::cat("names[", k, "]"),
                             "tensor '" + u.names[k] +
                                 "' was not declared in the M2N init info; an update names "
                                 "tensors the init info announced");
        const std::size_t i = it->second;
        out.names.push_back(names[i]);
        out.dtype_names.push_back(dtype_names[i]);
        out.shapes.push_back(shapes[i]);
        out.src_placements->push_back(src_placements[i]);
      }
    }
    out.is_checkpoint_format = u.is_checkpoint_format;
    return out;
  }

  //! vLLM's checks (M2NWeightTransferInitInfo.__post_init__, M2NWeightTransferEngine's init) and
  //! this library's (NcclInitInfo's rendezvous rules, NcclUpdateInfo's per-tensor ones).
  //! @throws config_error naming the first field at fault.
  void validate() const {
    const auto same_length = [&](const char* field, std::size_t n) {
      if (n != names.size())
        throw config_error(field, detail::cat("has ", n, " entries but names has ", names.size()));
    };
    same_length("dtype_names", dtype_names.size());
    same_length("shapes", shapes.size());
    same_length("src_placements", src_placements.size());
    if (rank_offset < 1 || rank_offset >= world_size)
      throw config_error("rank_offset",
                         detail::cat("must leave at least one trainer rank and one worker in "
                                     "world_size ",
                                     world_size, ", got ", rank_offset));
    const int workers = world_size - rank_offset;
    if (m2n_mesh_size(dst_mesh_dims, "dst_mesh_dims") != workers)
      throw config_error("dst_mesh_dims", detail::cat("must cover the ", workers, " workers, got ",
                                                      dst_mesh_dims[0], " x ", dst_mesh_dims[1]));
    rendezvous().validate();
    if (m2n_mesh_size(src_mesh_dims) != rank_offset)
      throw config_error(
          "src_mesh_dims",
          detail::cat("the source mesh covers ", src_mesh_dims[0] * src_mesh_dims[1],
                      " ranks, but there are ", rank_offset, " trainer ranks (rank_offset)"));
    if (max_cta && *max_cta < 1)
      throw config_error("max_cta", detail::cat("must be >= 1, got ", *max_cta));
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (const auto [it, fresh] = seen.emplace(names[i], i); !fresh)
        throw config_error(detail::cat("names[", i, "]"),
                           detail::cat("tensor '", names[i], "' is declared twice (also names[",
                                       it->second, "])"));
    const auto u = plan();
    u.validate();
    // vLLM's validate_layout: the sharding axis divides the dim evenly (uneven splits go in an
    // update info's `shards`).
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (!src_placements[i]) continue;
      const auto& p = *src_placements[i];
      const std::size_t axis = p[0] >= 0 ? 0 : 1;
      const auto dim = static_cast<std::size_t>(p[axis]);
      if (shapes[i][dim] % src_mesh_dims[axis] != 0)
        throw config_error(detail::cat("src_placements[", i, "]"),
                           detail::cat("tensor '", names[i], "': dim ", dim, " (size ",
                                       shapes[i][dim], ") over ", src_mesh_dims[axis],
                                       " ranks does not divide evenly, which vLLM's nccl_m2n "
                                       "does not allow; send uneven shards as `shards` in the "
                                       "update info"));
    }
  }

  friend bool operator==(const M2NInitInfo&, const M2NInitInfo&) = default;
};

//! The engines' InitRequest (engine/adapter.hpp): the rendezvous with NcclInitInfo's packing
//! defaults, M = rank_offset trainer ranks, and the plan (every tensor, as a sharded update) that
//! updates of names only refer to. @throws config_error as validate() does.
inline InitRequest to_init_request(const M2NInitInfo& info, InitContext c) {
  info.validate();
  InitRequest r = to_init_request(info.rendezvous(), c);
  r.trainer_ranks = info.rank_offset;
  r.plan = to_update_request(info.plan(), UpdateContext{});
  return r;
}

//! The engines' UpdateRequest of the tensors `u` names, in its order, from the plan of the
//! engine's M2N init (plan_update). @throws state_error before an init; config_error("dtype_names")
//! when the engine was initialized with an NcclInitInfo (no plan to refer to);
//! config_error("names[k]") for a name the plan does not have.
inline UpdateRequest to_update_request(const M2NUpdateInfo& u, const UpdateContext& c) {
  if (!c.init) throw state_error("update_weights before init_transfer_engine");
  if (!c.init->plan)
    throw config_error("dtype_names",
                       "an update info of names only (vLLM's nccl_m2n) refers to the plan of an "
                       "M2N init info, but this engine was initialized with an NCCL one: send "
                       "dtype_names and shapes too");
  return plan_update(*c.init->plan, u.names);
}

}  // namespace weightsync
