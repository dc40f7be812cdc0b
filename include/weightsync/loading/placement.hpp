// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Where a received (trainer-named, unfused, unsharded) tensor goes in an engine's parameters:
//! Placement, the LoadMap that computes it, and name patterns
//! ("model.layers.{i}.mlp.up_proj.weight") with TP sharding rules. A RenameMap of such rules is the
//! simplest LoadMap; model maps
//! (<weightsync/loading/models.hpp>) add fusion, and the param_mappings JSON form builds one too.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! Where one received tensor lands. The source is seen as 2-D [R, C] (R = shape[0], C = the
//! product of the other dims; a 1-D tensor is [R, 1], a scalar [1, 1]). In order: its rows are
//! rotary-permuted (permute_heads > 0), the slice [slice_begin, slice_begin + slice_len) along
//! slice_dim is kept, and the result is written, cast to the parameter's dtype, at row dst_row of
//! the parameter (of its expert-th slice along dim 0 when expert >= 0). The piece's column count
//! must equal the parameter's row length, so the destination region is contiguous.
struct Placement {
  std::string param;               //!< the engine parameter's name
  std::int64_t expert = -1;        //!< index along a stacked parameter's dim 0; -1: not stacked
  std::int64_t dst_row = 0;        //!< first destination row (in the expert slice if stacked)
  int slice_dim = 0;               //!< 0: slice rows, 1: slice columns (2-D sources only)
  std::int64_t slice_begin = 0;    //!< first index kept along slice_dim
  std::int64_t slice_len = -1;     //!< indices kept; -1: all from slice_begin on
  std::int64_t permute_heads = 0;  //!< > 0: rotary permute with this many heads first
  //! The engine deliberately has no place for this tensor (lm_head with tied embeddings): it is
  //! skipped, and not an error without PlanOptions::ignore_unmapped. The other fields are unused.
  bool skip = false;
  friend bool operator==(const Placement&, const Placement&) = default;
};

//! Maps a received tensor to its placement; std::nullopt: not a tensor this engine loads.
using LoadMap = std::function<std::optional<Placement>(const TensorMeta&)>;

//! This process's tensor-parallel position.
struct TpConfig {
  int rank = 0;
  int size = 1;
};

//! The [begin, begin + len) share of `extent` for shard `index` of `count` equal shards.
//! @throws config_error (naming `what`) when `extent` does not divide evenly.
inline std::pair<std::int64_t, std::int64_t> even_shard(std::int64_t extent, int count, int index,
                                                        const std::string& what) {
  if (count < 1 || index < 0 || index >= count)
    throw config_error(what, detail::cat("shard ", index, " of ", count, " is out of range"));
  if (extent % count != 0)
    throw config_error(what, detail::cat("extent ", extent, " does not split into ", count,
                                         " equal tensor-parallel shards"));
  const std::int64_t len = extent / count;
  return {len * index, len};
}

//! A name pattern: literal text with `{x}` placeholders that match one or more decimal digits
//! ("model.layers.{i}.mlp.experts.{e}.up_proj.weight"). No regular expressions.
class NamePattern {
 public:
  NamePattern() = default;
  //! @throws config_error for an unclosed '{' or an empty placeholder name.
  explicit NamePattern(std::string text) : text_(std::move(text)) {
    for (std::size_t i = 0; i < text_.size(); ++i) {
      if (text_[i] != '{') continue;
      const auto close = text_.find('}', i);
      if (close == std::string::npos || close == i + 1)
        throw config_error("pattern '" + text_ + "'", "unclosed or empty '{}' placeholder");
      i = close;
    }
  }
  const std::string& text() const noexcept { return text_; }

  //! Matches `name` against the pattern; on success fills `captures` (placeholder -> digits).
  bool match(std::string_view name,
             std::vector<std::pair<std::string, std::string>>& captures) const {
    captures.clear();
    std::size_t p = 0, n = 0;
    while (p < text_.size()) {
      if (text_[p] != '{') {
        if (n >= name.size() || name[n] != text_[p]) return false;
        ++p, ++n;
        continue;
      }
      const auto close = text_.find('}', p);
      std::size_t end = n;
      while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
      if (end == n) return false;
      captures.emplace_back(text_.substr(p + 1, close - p - 1),
                            std::string(name.substr(n, end - n)));
      n = end;
      p = close + 1;
    }
    return n == name.size();
  }

  //! The pattern with its placeholders replaced by `captures`. @throws config_error when one is
  //! missing.
  std::string format(const std::vector<std::pair<std::string, std::string>>& captures) const {
    std::string out;
    for (std::size_t p = 0; p < text_.size(); ++p) {
      if (text_[p] != '{') {
        out += text_[p];
        continue;
      }
      const auto close = text_.find('}', p);
      const std::string key = text_.substr(p + 1, close - p - 1);
      bool found = false;
      for (const auto& [k, v] : captures)
        if (k == key) out += v, found = true;
      if (!found)
        throw config_error("pattern '" + text_ + "'", "placeholder {" + key + "} is not captured");
      p = close;
    }
    return out;
  }

 private:
  std::string text_;
};

//! One rename rule: a trainer name (pattern) to an engine name (pattern), with its TP sharding.
struct RenameRule {
  NamePattern from;
  NamePattern to;
  int shard_dim = -1;  //!< -1: replicated; 0: rows (column-parallel); 1: columns (row-parallel)
  std::int64_t permute_heads = 0;     //!< > 0: rotary permute with this many heads
  std::int64_t permute_head_dim = 0;  //!< > 0: rotary permute with R / permute_head_dim heads
};

//! A LoadMap of rename rules, tried in order (exact names are patterns without placeholders).
//! Each tensor lands whole (or as this rank's even shard) at row 0 of its renamed parameter.
class RenameMap {
 public:
  explicit RenameMap(TpConfig tp = {}) : tp_(tp) {}
  //! Adds a rule; returns *this for chaining.
  RenameMap& add(std::string from, std::string to, int shard_dim = -1,
                 std::int64_t permute_heads = 0) {
    rules_.push_back(
        {NamePattern(std::move(from)), NamePattern(std::move(to)), shard_dim, permute_heads, 0});
    return *this;
  }
  RenameMap& add(RenameRule rule) {
    rules_.push_back(std::move(rule));
    return *this;
  }
  const std::vector<RenameRule>& rules() const noexcept { return rules_; }

  std::optional<Placement> operator()(const TensorMeta& m) const {
    std::vector<std::pair<std::string, std::string>> caps;
    for (const auto& r : rules_) {
      if (!r.from.match(m.name, caps)) continue;
      Placement p;
      p.param = r.to.format(caps);
      const std::int64_t rows = m.shape.empty() ? 1 : m.shape[0];
      if (r.permute_heads > 0) p.permute_heads = r.permute_heads;
      if (r.permute_head_dim > 0) {
        if (rows % r.permute_head_dim != 0)
          throw config_error(
              "tensor '" + m.name + "'",
              detail::cat(rows, " rows are not a multiple of head_dim ", r.permute_head_dim));
        p.permute_heads = rows / r.permute_head_dim;
      }
      if (r.shard_dim >= 0 && tp_.size > 1) {
        if (static_cast<std::size_t>(r.shard_dim) >= m.shape.size() || r.shard_dim > 1)
          throw config_error("tensor '" + m.name + "'",
                             detail::cat("cannot shard dim ", r.shard_dim, " of shape ",
                                         detail::shape_string(m.shape)));
        p.slice_dim = r.shard_dim;
        std::tie(p.slice_begin, p.slice_len) =
            even_shard(m.shape[static_cast<std::size_t>(r.shard_dim)], tp_.size, tp_.rank,
                       "tensor '" + m.name + "'");
      }
      return p;
    }
    return std::nullopt;
  }

 private:
  TpConfig tp_;
  std::vector<RenameRule> rules_;
};

}  // namespace weightsync
