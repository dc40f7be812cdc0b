// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The sharding fields of the update info, read and written strictly (errors name the entry:
//! "shards[3].dim", "src_placements[2][0]"): this library's `shards` (per tensor null, or
//! {"dim", "sizes", "ranks"}) and vLLM's M2N `src_mesh_dims` / `src_placements`.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/json_read.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync::detail {

inline std::vector<std::int64_t> json_ints(const nlohmann::json& j, const std::string& field,
                                           std::int64_t lo) {
  require_array(j, field);
  std::vector<std::int64_t> v;
  for (std::size_t i = 0; i < j.size(); ++i)
    v.push_back(json_int_in(j[i], cat(field, "[", i, "]"), lo,
                            std::numeric_limits<std::int64_t>::max()));
  return v;
}

//! `shards`: an array of null (not split: trainer rank 0 sends it) or
//! {"dim": d (absent, null or -1: not split), "sizes": [...], "ranks": [...]}.
inline std::vector<std::optional<ShardSpec>> read_shards(const nlohmann::json& j) {
  require_array(j, "shards");
  std::vector<std::optional<ShardSpec>> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (j[i].is_null()) {
      out.emplace_back();
      continue;
    }
    const std::string f = cat("shards[", i, "]");
    JsonObject o(j[i], f, {"dim", "sizes", "ranks"});
    ShardSpec s;
    if (auto* x = o.optional("dim"))
      s.dim = static_cast<int>(json_int_in(*x, f + ".dim", -1, std::numeric_limits<int>::max()));
    if (auto* x = o.optional("sizes")) s.sizes = json_ints(*x, f + ".sizes", 0);
    if (auto* x = o.optional("ranks"))
      for (auto r : json_ints(*x, f + ".ranks", 0)) {
        if (r > std::numeric_limits<int>::max())
          throw config_error(f + ".ranks", cat("rank ", r, " is out of range"));
        s.ranks.push_back(static_cast<int>(r));
      }
    out.emplace_back(std::move(s));
  }
  return out;
}

inline nlohmann::json write_shards(const std::vector<std::optional<ShardSpec>>& shards) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& s : shards) {
    if (!s) {
      a.push_back(nullptr);
      continue;
    }
    nlohmann::json o = nlohmann::json::object();
    o["dim"] = s->dim;
    if (!s->sizes.empty()) o["sizes"] = s->sizes;
    if (!s->ranks.empty()) o["ranks"] = s->ranks;
    a.push_back(std::move(o));
  }
  return a;
}

//! `src_placements`: per tensor null (replicated) or [c0, c1] (-1 or a tensor dim per mesh axis).
inline std::vector<std::optional<std::vector<std::int64_t>>> read_placements(
    const nlohmann::json& j) {
  require_array(j, "src_placements");
  std::vector<std::optional<std::vector<std::int64_t>>> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (j[i].is_null()) {
      out.emplace_back();
      continue;
    }
    out.emplace_back(json_ints(j[i], cat("src_placements[", i, "]"), -1));
  }
  return out;
}

}  // namespace weightsync::detail
