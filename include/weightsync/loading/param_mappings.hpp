// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The weight bridge's mapping file as a LoadMap. Its form (written by the trainer):
//! `{"tp_degree": 2, "dp_shard_degree": 1, "param_mappings": {"<trainer name>": {"vllm_name":
//! "<engine name>", "local_shape": [..], "tp_shard_dim": 0, "needs_permute": false}}}`, where
//! "sglang_name" may stand for "vllm_name", local_shape is the trainer's local shard (dim 0 divided
//! by dp_shard_degree, the tp_shard_dim by tp_degree when sharded).
//!
//! The bridge writes tp_shard_dim 0 for replicated tensors too, so whether a tensor is
//! tensor-parallel is read from its shapes: it is sharded when the received (full) shape is
//! local_shape scaled by tp_degree along tp_shard_dim, and replicated when it is local_shape itself
//! (up to the dp scaling of dim 0) or when tp_degree is 1. A sharded tensor is sharded again along
//! tp_shard_dim over the engine's TP size; a replicated one lands whole on every engine rank. (A
//! trainer without tensor parallelism can thus not say what the engine should shard: use a
//! RenameMap or a model map for that.)
//!
//! Several trainer names mapped to one engine name are fused: stacked along dim 0, each piece
//! taking its rows on this engine rank (its full rows, divided by the engine's TP size when the
//! piece is sharded along dim 0). The well-known pieces stack in vLLM's order whatever the key
//! order (q/wq/q_proj, then k, then v; gate/w1/gate_proj, then up/w3/up_proj); other pieces stack
//! in the order parse_param_mappings() returns them, which for an nlohmann::json object is the
//! keys' sorted order. needs_permute applies the rotary permute with rows / head_dim heads.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/error.hpp"
#include "weightsync/loading/placement.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! One entry of a param_mappings file.
struct ParamMapping {
  std::string trainer_name;
  std::string vllm_name;
  std::vector<std::int64_t> local_shape;
  int tp_shard_dim = 0;
  bool needs_permute = false;
};

//! A parsed param_mappings file.
struct ParamMappings {
  std::int64_t tp_degree = 1;
  std::int64_t dp_shard_degree = 1;
  std::vector<ParamMapping> mappings;

  //! The full shapes a trainer tensor mapped by `m` may have: local_shape scaled by the trainer's
  //! dp (dim 0) and tp (tp_shard_dim) degrees, or not (an unsharded parameter).
  std::vector<std::vector<std::int64_t>> accepted_shapes(const ParamMapping& m) const {
    std::vector<std::vector<std::int64_t>> out;
    for (int dp = 0; dp < 2; ++dp)
      for (int tp = 0; tp < 2; ++tp) out.push_back(scaled_shape(m, dp != 0, tp != 0));
    return out;
  }

  //! local_shape scaled by dp_shard_degree along dim 0 (when `dp`) and by tp_degree along
  //! tp_shard_dim (when `tp`). @throws config_error naming the mapping when an extent overflows.
  std::vector<std::int64_t> scaled_shape(const ParamMapping& m, bool dp, bool tp) const {
    auto s = m.local_shape;
    const auto scale = [&](std::size_t d, std::int64_t by) {
      if (by > 1 && s[d] > INT64_MAX / by)
        throw config_error("param_mappings." + m.trainer_name + ".local_shape",
                           detail::cat("extent ", s[d], " times ", by, " overflows"));
      s[d] *= by;
    };
    if (dp && !s.empty()) scale(0, dp_shard_degree);
    if (tp && static_cast<std::size_t>(m.tp_shard_dim) < s.size())
      scale(static_cast<std::size_t>(m.tp_shard_dim), tp_degree);
    return s;
  }
};

//! Parses the JSON form above. @throws config_error naming the key at fault.
inline ParamMappings parse_param_mappings(const nlohmann::json& j) {
  using namespace detail;
  JsonObject top(j, "param_mappings file", {"tp_degree", "dp_shard_degree", "param_mappings"});
  ParamMappings out;
  if (auto* v = top.optional("tp_degree")) out.tp_degree = json_int_in(*v, "tp_degree", 1, 1 << 20);
  if (auto* v = top.optional("dp_shard_degree"))
    out.dp_shard_degree = json_int_in(*v, "dp_shard_degree", 1, 1 << 20);
  const auto& pm = top.required("param_mappings");
  if (!pm.is_object()) json_type_mismatch("param_mappings", "an object", pm);
  for (auto it = pm.begin(); it != pm.end(); ++it) {
    const std::string f = "param_mappings." + it.key();
    JsonObject e(*it, f,
                 {"vllm_name", "sglang_name", "local_shape", "tp_shard_dim", "needs_permute"});
    ParamMapping m;
    m.trainer_name = it.key();
    const auto* name = e.optional("vllm_name");
    if (!name) name = e.optional("sglang_name");
    if (!name) throw config_error(f + ".vllm_name", "missing (or sglang_name)");
    m.vllm_name = json_string(*name, f + ".vllm_name");
    const auto& ls = e.required("local_shape");
    require_array(ls, f + ".local_shape");
    for (std::size_t i = 0; i < ls.size(); ++i)
      m.local_shape.push_back(json_int_in(ls[i], cat(f, ".local_shape[", i, "]"), 0, INT64_MAX));
    if (auto* v = e.optional("tp_shard_dim"))
      m.tp_shard_dim = static_cast<int>(json_int_in(*v, f + ".tp_shard_dim", 0, 1));
    if (auto* v = e.optional("needs_permute"))
      m.needs_permute = json_bool(*v, f + ".needs_permute");
    out.mappings.push_back(std::move(m));
  }
  return out;
}

namespace detail {

//! The position of a well-known fused piece in its parameter, from the last component of the
//! trainer's name before ".weight" / ".bias": q 0, k 1, v 2; gate 0, up 1. -1: not one of them.
inline int fused_piece_role(std::string_view name) {
  for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")})
    if (name.ends_with(suffix)) {
      name.remove_suffix(suffix.size());
      break;
    }
  if (const auto dot = name.rfind('.'); dot != std::string_view::npos) name.remove_prefix(dot + 1);
  for (std::string_view q : {"wq", "q_proj", "q"})
    if (name == q) return 0;
  for (std::string_view k : {"wk", "k_proj", "k"})
    if (name == k) return 1;
  for (std::string_view v : {"wv", "v_proj", "v"})
    if (name == v) return 2;
  for (std::string_view g : {"w1", "gate_proj", "gate"})
    if (name == g) return 0;
  for (std::string_view u : {"w3", "up_proj", "up"})
    if (name == u) return 1;
  return -1;
}

//! Where a mapped trainer name lands: its mapping, and the pieces stacked before it in its fused
//! engine parameter.
struct ParamMappingEntry {
  std::size_t mapping;
  std::vector<std::size_t> before;
};
using ParamMappingIndex = std::unordered_map<std::string, ParamMappingEntry>;

//! The mappings grouped by engine name: the pieces of each, the names in first-seen order.
struct ParamMappingGroups {
  std::unordered_map<std::string, std::vector<std::size_t>> pieces;
  std::vector<std::string> order;
};

//! Step 1 of param_mappings_map: indexes the mappings by trainer name and groups them by engine
//! name. @throws config_error for a trainer name that appears twice or a needs_permute without
//! a head_dim.
inline void index_param_mappings(const ParamMappings& pm, std::int64_t head_dim,
                                 ParamMappingIndex& index, ParamMappingGroups& groups) {
  for (std::size_t i = 0; i < pm.mappings.size(); ++i) {
    const auto& m = pm.mappings[i];
    const std::string f = "param_mappings." + m.trainer_name;
    if (m.needs_permute && head_dim <= 0)
      throw config_error(f + ".needs_permute", "needs a head_dim");
    if (!index.emplace(m.trainer_name, ParamMappingEntry{i, {}}).second)
      throw config_error(f, "appears twice");
    auto [g, fresh] = groups.pieces.try_emplace(m.vllm_name);
    if (fresh) groups.order.push_back(m.vllm_name);
    g->second.push_back(i);
  }
}

//! Step 2: the stacking order of each fused engine parameter (the well-known roles' order when
//! every piece has a distinct one, else the mappings' order), recorded in each piece's `before`.
//! @throws config_error for a scalar fused with other tensors.
inline void order_fused_pieces(const ParamMappings& pm, ParamMappingGroups& groups,
                               ParamMappingIndex& index) {
  for (const auto& name : groups.order) {
    auto& pieces = groups.pieces[name];
    if (pieces.size() < 2) continue;
    std::vector<int> roles;
    for (const std::size_t i : pieces) {
      const auto& m = pm.mappings[i];
      if (m.local_shape.empty())
        throw config_error("param_mappings." + m.trainer_name + ".local_shape",
                           "a scalar cannot be fused into '" + name + "' with other tensors");
      roles.push_back(fused_piece_role(m.trainer_name));
    }
    auto sorted = roles;
    std::sort(sorted.begin(), sorted.end());
    const bool by_role =
        sorted.front() >= 0 && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    if (by_role)
      std::stable_sort(pieces.begin(), pieces.end(), [&](std::size_t a, std::size_t b) {
        return fused_piece_role(pm.mappings[a].trainer_name) <
               fused_piece_role(pm.mappings[b].trainer_name);
      });
    for (std::size_t k = 0; k < pieces.size(); ++k)
      index.at(pm.mappings[pieces[k]].trainer_name)
          .before.assign(pieces.begin(), pieces.begin() + k);
  }
}

//! Which of accepted_shapes() the received `t` has: {scaled by dp, scaled by tp}. Replicated
//! first: where the dp and tp scalings collide (tp_shard_dim 0, equal degrees) a wrong guess then
//! fails loudly (the whole tensor does not fit a sharded parameter). @throws config_error when
//! none fits.
inline std::pair<bool, bool> received_scaling(const ParamMappings& pm, const ParamMapping& m,
                                              const TensorMeta& t) {
  for (const auto& [dp, tpd] : {std::pair{true, false}, std::pair{false, false},
                                std::pair{true, true}, std::pair{false, true}})
    if (pm.scaled_shape(m, dp, tpd) == t.shape) return {dp, tpd};
  throw config_error(
      "param_mappings." + m.trainer_name + ".local_shape",
      cat(shape_string(m.local_shape), " does not match the received shape ", shape_string(t.shape),
          " at tp_degree ", pm.tp_degree, ", dp_shard_degree ", pm.dp_shard_degree));
}

//! Step 3, for each received tensor: the Placement on engine rank `tp` of tensor `t`, mapped by
//! `e` (see param_mappings_map).
inline Placement param_mapping_placement(const ParamMappings& pm, const ParamMappingEntry& e,
                                         TpConfig tp, std::int64_t head_dim, const TensorMeta& t) {
  const ParamMapping& m = pm.mappings[e.mapping];
  const std::string f = "param_mappings." + m.trainer_name;
  const auto scale = received_scaling(pm, m, t);
  const bool dp_scaled = scale.first, tp_scaled = scale.second;
  const auto sharded = [&](const ParamMapping& x) {
    return tp_scaled && pm.tp_degree > 1 &&
           static_cast<std::size_t>(x.tp_shard_dim) < x.local_shape.size();
  };
  Placement p{m.vllm_name};
  const std::int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  if (m.needs_permute) {
    if (rows % head_dim != 0)
      throw config_error(f + ".needs_permute",
                         cat(rows, " rows are not a multiple of head_dim ", head_dim));
    p.permute_heads = rows / head_dim;
  }
  if (sharded(m) && tp.size > 1) {
    if (m.tp_shard_dim > 1 || static_cast<std::size_t>(m.tp_shard_dim) >= t.shape.size())
      throw config_error(f + ".tp_shard_dim", cat("cannot shard dim ", m.tp_shard_dim, " of shape ",
                                                  shape_string(t.shape)));
    p.slice_dim = m.tp_shard_dim;
    std::tie(p.slice_begin, p.slice_len) =
        even_shard(t.shape[static_cast<std::size_t>(m.tp_shard_dim)], tp.size, tp.rank,
                   "tensor '" + t.name + "'");
  }
  // A fused piece starts after this rank's rows of the pieces before it (read from their
  // local_shape, scaled the way this tensor's is).
  for (const std::size_t j : e.before) {
    const ParamMapping& o = pm.mappings[j];
    const std::int64_t full = pm.scaled_shape(o, dp_scaled, tp_scaled)[0];
    p.dst_row += sharded(o) && o.tp_shard_dim == 0
                     ? even_shard(full, tp.size, tp.rank, "param_mappings." + o.trainer_name).second
                     : full;
  }
  return p;
}

}  // namespace detail

//! A LoadMap for the engine rank `tp` from parsed mappings: exact renames; tensors the trainer
//! held TP-sharded sharded along their tp_shard_dim over tp.size ranks, the others replicated;
//! pieces fused into one engine name stacked along dim 0 (see the file comment); permuted with
//! rows / head_dim heads where needs_permute. A received tensor whose shape fits none of
//! accepted_shapes() is a config_error.
inline LoadMap param_mappings_map(const ParamMappings& pm, TpConfig tp, std::int64_t head_dim = 0) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    throw config_error("tp", detail::cat("rank ", tp.rank, " of ", tp.size, " is out of range"));
  detail::ParamMappingIndex index;
  detail::ParamMappingGroups groups;
  detail::index_param_mappings(pm, head_dim, index, groups);
  detail::order_fused_pieces(pm, groups, index);
  return [pm, index, tp, head_dim](const TensorMeta& t) -> std::optional<Placement> {
    auto it = index.find(t.name);
    if (it == index.end()) return std::nullopt;
    return detail::param_mapping_placement(pm, it->second, tp, head_dim, t);
  };
}

}  // namespace weightsync
