// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The weight bridge's mapping file as a RenameMap. Its form (written by the trainer):
//! `{"tp_degree": 2, "dp_shard_degree": 1, "param_mappings": {"<trainer name>": {"vllm_name":
//! "<engine name>", "local_shape": [..], "tp_shard_dim": 0, "needs_permute": false}}}`, where
//! "sglang_name" may stand for "vllm_name", local_shape is the trainer's local shard (dim 0 divided
//! by dp_shard_degree, the tp_shard_dim by tp_degree when sharded). The engine shards every
//! mapped tensor along tp_shard_dim over its own TP size; needs_permute applies the rotary permute
//! with rows / head_dim heads.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
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
      for (int tp = 0; tp < 2; ++tp) {
        auto s = m.local_shape;
        if (dp && !s.empty()) s[0] *= dp_shard_degree;
        if (tp && static_cast<std::size_t>(m.tp_shard_dim) < s.size())
          s[static_cast<std::size_t>(m.tp_shard_dim)] *= tp_degree;
        out.push_back(std::move(s));
      }
    return out;
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

//! A LoadMap for the engine rank `tp` from parsed mappings: exact renames, every mapped tensor
//! sharded along its tp_shard_dim over tp.size ranks, permuted with rows / head_dim heads where
//! needs_permute. A received tensor whose shape fits none of accepted_shapes() is a config_error.
inline LoadMap param_mappings_map(const ParamMappings& pm, TpConfig tp, std::int64_t head_dim = 0) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < pm.mappings.size(); ++i) {
    const auto& m = pm.mappings[i];
    if (m.needs_permute && head_dim <= 0)
      throw config_error("param_mappings." + m.trainer_name + ".needs_permute", "needs a head_dim");
    index.emplace(m.trainer_name, i);
  }
  return [pm, index, tp, head_dim](const TensorMeta& t) -> std::optional<Placement> {
    auto it = index.find(t.name);
    if (it == index.end()) return std::nullopt;
    const ParamMapping& m = pm.mappings[it->second];
    bool ok = false;
    for (const auto& s : pm.accepted_shapes(m)) ok = ok || s == t.shape;
    if (!ok)
      throw config_error(
          "param_mappings." + t.name + ".local_shape",
          detail::cat(detail::shape_string(m.local_shape), " does not match the received shape ",
                      detail::shape_string(t.shape), " at tp_degree ", pm.tp_degree,
                      ", dp_shard_degree ", pm.dp_shard_degree));
    RenameMap one(tp);
    one.add({NamePattern(m.trainer_name), NamePattern(m.vllm_name), m.tp_shard_dim, 0,
             m.needs_permute ? head_dim : 0});
    return one(t);
  };
}

}  // namespace weightsync
