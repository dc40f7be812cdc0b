// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! How a tensor is split across the M trainer ranks that send it (FSDP / DTensor Shard(dim), a TP
//! trainer's split along another dim, uneven shards, or replicated), and the geometry of each
//! piece inside the full tensor, so that a receiver can land every piece at its place. Both sides
//! derive the same pieces from the metadata and the specs alone.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/error.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! How one tensor is split. Default: whole, sent by trainer rank 0 (what vLLM's JSON means).
struct ShardSpec {
  //! The tensor dim that is split; -1: not split (one piece, the whole tensor, from ranks[0] or 0).
  int dim = -1;
  //! Piece sizes along `dim`, summing to shape[dim]. Empty: torch.chunk's split over the ranks
  //! (ceil(n / M) each, the last ones smaller or empty), which is what FSDP2's Shard(dim) holds.
  std::vector<std::int64_t> sizes;
  //! The trainer rank that holds (and sends) each piece. Empty: piece p on rank p.
  std::vector<int> ranks;

  bool split() const noexcept { return dim >= 0; }
  friend bool operator==(const ShardSpec&, const ShardSpec&) = default;
};

//! How a transfer is split over trainer ranks: ranks 0..trainers-1 each send the pieces that
//! `specs` (one per tensor, in declared order) give them; the other ranks receive. Handed to
//! Backend::send / receive (nullptr there: one root sends whole tensors). A view: the specs must
//! outlive the call.
struct ShardLayout {
  std::span<const ShardSpec> specs;
  int trainers = 1;
};

//! One piece of a tensor: rows [begin, end) of dim `dim` (the whole tensor when not split), held
//! by trainer rank `rank`. Inside the full tensor (row-major) it is `blocks` blocks of
//! `block_bytes` bytes, the first at byte `offset`, one every `pitch` bytes (blocks == 1 for a
//! split along dim 0, or the leading dims of size 1: then it is contiguous).
struct ShardPiece {
  std::size_t tensor = 0;
  int rank = 0;
  std::int64_t begin = 0, end = 0;
  std::size_t offset = 0;
  std::size_t blocks = 1;
  std::size_t block_bytes = 0;
  std::size_t pitch = 0;
  std::size_t bytes() const noexcept { return blocks * block_bytes; }
  bool contiguous() const noexcept { return blocks <= 1 || block_bytes == pitch; }
};

//! torch.chunk's split of `n` rows over `m` ranks: ceil(n / m) rows each while they last.
inline std::vector<std::int64_t> chunk_sizes(std::int64_t n, int m) {
  std::vector<std::int64_t> s(static_cast<std::size_t>(m), 0);
  if (m <= 0) return s;
  const std::int64_t per = (n + m - 1) / m;
  std::int64_t left = n;
  for (auto& x : s) {
    x = std::min(per, left);
    left -= x;
  }
  return s;
}

//! The pieces of tensor `index` under `spec`, with `trainers` trainer ranks, in piece order.
//! @throws config_error naming the tensor and what is wrong (dim out of range, sizes that do not
//!   sum to the dim, a rank outside 0..trainers-1, counts that differ).
inline std::vector<ShardPiece> shard_pieces(const TensorMeta& meta, std::size_t index,
                                            const ShardSpec& spec, int trainers) {
  const auto field = [&](const char* f) { return detail::cat("shards[", index, "].", f); };
  const std::size_t total = meta.nbytes();
  if (!spec.split()) {
    const int r = spec.ranks.empty() ? 0 : spec.ranks[0];
    if (r < 0 || r >= trainers || spec.ranks.size() > 1 || !spec.sizes.empty())
      throw config_error(field("ranks"),
                         detail::cat("tensor '", meta.name, "' is not split: one rank in 0..",
                                     trainers - 1, " at most, and no sizes"));
    return {ShardPiece{index, r, 0, 1, 0, 1, total, total}};
  }
  const auto nd = static_cast<int>(meta.shape.size());
  if (spec.dim >= nd)
    throw config_error(field("dim"), detail::cat("tensor '", meta.name, "' has ", nd,
                                                 " dims; cannot split dim ", spec.dim));
  const std::int64_t n = meta.shape[static_cast<std::size_t>(spec.dim)];
  const int pieces = !spec.sizes.empty()
                         ? static_cast<int>(spec.sizes.size())
                         : (!spec.ranks.empty() ? static_cast<int>(spec.ranks.size()) : trainers);
  const auto sizes = spec.sizes.empty() ? chunk_sizes(n, pieces) : spec.sizes;
  if (!spec.ranks.empty() && spec.ranks.size() != sizes.size())
    throw config_error(field("ranks"), detail::cat("tensor '", meta.name, "': ", spec.ranks.size(),
                                                   " ranks for ", sizes.size(), " pieces"));
  std::size_t outer = 1, inner = dtype_size(meta.dtype);
  for (int d = 0; d < nd; ++d) {
    const auto v = static_cast<std::size_t>(meta.shape[static_cast<std::size_t>(d)]);
    if (d < spec.dim) outer *= v;
    if (d > spec.dim) inner *= v;
  }
  std::vector<ShardPiece> out;
  std::int64_t at = 0;
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    const int r = spec.ranks.empty() ? static_cast<int>(p) : spec.ranks[p];
    if (r < 0 || r >= trainers)
      throw config_error(field("ranks"),
                         detail::cat("tensor '", meta.name, "': piece ", p, " on rank ", r,
                                     ", outside the ", trainers, " trainer ranks"));
    if (sizes[p] < 0 || sizes[p] > n - at)
      throw config_error(
          field("sizes"),
          detail::cat("tensor '", meta.name, "': piece sizes exceed dim ", spec.dim, " (", n, ")"));
    ShardPiece s;
    s.tensor = index;
    s.rank = r;
    s.begin = at;
    s.end = at + sizes[p];
    s.blocks = outer;
    s.block_bytes = static_cast<std::size_t>(sizes[p]) * inner;
    s.pitch = static_cast<std::size_t>(n) * inner;
    s.offset = static_cast<std::size_t>(at) * inner;
    out.push_back(s);
    at += sizes[p];
  }
  if (at != n)
    throw config_error(field("sizes"), detail::cat("tensor '", meta.name, "': pieces cover ", at,
                                                   " of the ", n, " rows of dim ", spec.dim));
  return out;
}

namespace detail {
//! Checks what can be checked of a spec without M (the number of trainer ranks): the dim against
//! the tensor, sizes against the dim, the counts. Ranks are checked against M by shard_pieces.
//! @throws config_error naming the entry: "shards[i].dim", "shards[i].sizes", "shards[i].ranks".
inline void check_shard(const TensorMeta& meta, std::size_t i, const ShardSpec& s) {
  const auto field = [&](const char* f) { return detail::cat("shards[", i, "].", f); };
  if (!s.split()) {
    if (!s.sizes.empty()) throw config_error(field("sizes"), "a tensor that is not split has none");
    if (s.ranks.size() > 1)
      throw config_error(field("ranks"), "a tensor that is not split has one rank at most");
    return;
  }
  if (s.dim >= static_cast<int>(meta.shape.size()))
    throw config_error(field("dim"), detail::cat("tensor '", meta.name, "' has ", meta.shape.size(),
                                                 " dims; cannot split dim ", s.dim));
  if (!s.sizes.empty()) {
    std::int64_t sum = 0;
    for (auto v : s.sizes) sum += v;
    const auto n = meta.shape[static_cast<std::size_t>(s.dim)];
    if (sum != n)
      throw config_error(field("sizes"), detail::cat("tensor '", meta.name, "': sizes sum to ", sum,
                                                     ", dim ", s.dim, " has ", n));
    if (!s.ranks.empty() && s.ranks.size() != s.sizes.size())
      throw config_error(field("ranks"), detail::cat("tensor '", meta.name, "': ", s.ranks.size(),
                                                     " ranks for ", s.sizes.size(), " sizes"));
  }
}
}  // namespace detail

//! The ranks of vLLM's 2-D M2N mesh `dims` ([a, b]: a * b), checked without overflow.
//! @throws config_error(field) unless `dims` is two ints >= 1 whose product fits an int.
inline int m2n_mesh_size(const std::vector<std::int64_t>& dims,
                         const std::string& field = "src_mesh_dims") {
  if (dims.size() != 2 || dims[0] < 1 || dims[1] < 1)
    throw config_error(field, "must be two positive ints");
  constexpr std::int64_t most = std::numeric_limits<int>::max();
  if (dims[0] > most / dims[1])
    throw config_error(
        field, detail::cat("a mesh of ", dims[0], " x ", dims[1], " ranks is more than ", most));
  return static_cast<int>(dims[0] * dims[1]);
}

//! vLLM's M2N layout (m2n_engine.py: `src_mesh_dims` [a, b], trainer rank = i * b + j, and per
//! parameter `src_placements`: null for replicated, or one code per mesh axis, -1 = replicate,
//! d >= 0 = shard tensor dim d over that axis) as a ShardSpec: the shard axis's ranks at index 0 of
//! the other axis send; replicas send nothing.
inline ShardSpec shard_spec_from_m2n(const std::vector<std::int64_t>& mesh_dims,
                                     const std::optional<std::vector<std::int64_t>>& placements,
                                     const std::string& field) {
  (void)m2n_mesh_size(mesh_dims);  // so that every rank below fits an int
  ShardSpec s;
  if (!placements) return s;
  if (placements->size() != 2) throw config_error(field, "must have one code per mesh axis (2)");
  const auto a = (*placements)[0], b = (*placements)[1];
  if (a < -1 || b < -1) throw config_error(field, "codes are -1 (replicate) or a tensor dim");
  if ((a >= 0) == (b >= 0))
    throw config_error(field, "exactly one mesh axis shards (as vLLM's nccl_m2n requires)");
  const bool axis0 = a >= 0;
  s.dim = static_cast<int>(axis0 ? a : b);
  const auto count = axis0 ? mesh_dims[0] : mesh_dims[1];
  for (std::int64_t k = 0; k < count; ++k)
    s.ranks.push_back(static_cast<int>(axis0 ? k * mesh_dims[1] : k));
  return s;
}

}  // namespace weightsync
