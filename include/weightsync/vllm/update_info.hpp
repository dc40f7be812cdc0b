// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! NcclUpdateInfo: what one weight update carries, as vLLM's NCCLWeightTransferUpdateInfo says it
//! (field names exactly vLLM's), with this library's additions (shards, num_trainer_ranks,
//! delta) and vLLM's sparse_nccl and M2N fields; its conversions to and from the engines'
//! UpdateRequest (to_update_request, to_update_info: engine/adapter.hpp). Its JSON is in
//! vllm/json.hpp; this header needs no JSON library.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/dtype.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! What one weight update carries: the ordered tensor list, optionally the packing settings
//! (which then override the init values for this update), and optionally how each tensor is split
//! over the M trainer ranks 0..M-1 of the group (a sharded transfer: every trainer rank sends the
//! pieces it holds).
//!
//! M is `num_trainer_ranks` when given, else a * b for vLLM's M2N mesh, else the init info's
//! rank_offset (the workers of a single server start at rank M, as in vLLM's M2N). Sharding, in
//! one of two forms (not both; neither, and no num_trainer_ranks: not sharded, trainer rank 0
//! sends everything, vLLM's meaning of its plain JSON; num_trainer_ranks alone: sharded, every
//! tensor whole from rank 0, the other trainer ranks in the group take part):
//! - `shards` (this library's): per tensor null (not split, rank 0 sends it) or
//!   {"dim": d, "sizes": [...], "ranks": [...]}: dim -1 (or absent) is not split, sent by ranks[0]
//!   (default 0); sizes are the pieces' rows along dim, uneven allowed (absent: torch.chunk's split
//!   over the ranks, what FSDP2's Shard(d) holds); ranks the trainer rank of each piece, any order
//!   (absent: piece p on rank p).
//! - vLLM's M2N: `src_mesh_dims` [a, b] (M = a * b, rank = i * b + j) and `src_placements`, per
//!   tensor null (replicated) or [c0, c1] (-1 replicate, d >= 0 shard dim d over that mesh axis);
//!   see shard_spec_from_m2n. It can only say "even torch.chunk split over one mesh axis", the
//!   pieces on that axis's ranks; `shards` adds uneven sizes and explicit ranks.
struct NcclUpdateInfo {
  std::vector<std::string> names;
  std::vector<std::string> dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::optional<bool> packed;
  std::optional<std::int64_t> packed_buffer_size_bytes;
  std::optional<int> packed_num_buffers;
  //! vLLM's base-class field (WeightTransferUpdateInfo.is_checkpoint_format, default true): whether
  //! the names are checkpoint names for the model's load_weights. Carried, not interpreted.
  bool is_checkpoint_format = true;
  //! Per tensor: null (not split) or its ShardSpec. Absent: not sharded.
  std::optional<std::vector<std::optional<ShardSpec>>> shards;
  //! vLLM M2N: the trainer's 2-D mesh [a, b].
  std::optional<std::vector<std::int64_t>> src_mesh_dims;
  //! vLLM M2N: per tensor null (replicated) or one placement code per mesh axis.
  std::optional<std::vector<std::optional<std::vector<std::int64_t>>>> src_placements;

  //! M, the trainer ranks in the group of a sharded transfer (see above).
  std::optional<int> num_trainer_ranks;

  //! A delta sync (DeltaUpdate, engine/update_request.hpp); absent: every tensor is sent whole.
  std::optional<DeltaUpdate> delta;
  //! vLLM's sparse_nccl update: per tensor, the number of (int32 flat index, value) pairs sent
  //! for it, as two broadcasts (indices, then values) applied in place. See
  //! <weightsync/delta/source.hpp> for how it differs from `delta`.
  std::optional<std::vector<std::int64_t>> num_updates_list;

  //! Whether this is a sharded transfer (any of shards, src_placements, num_trainer_ranks).
  bool sharded() const {
    return shards.has_value() || src_placements.has_value() || num_trainer_ranks.has_value();
  }
  //! M: num_trainer_ranks, else a * b of src_mesh_dims, else `rank_offset` (the init info's).
  //! @throws config_error("src_mesh_dims") for a mesh that is not two ints >= 1, or whose product
  //!   does not fit an int.
  int trainer_ranks(int rank_offset) const {
    if (num_trainer_ranks) return *num_trainer_ranks;
    if (src_mesh_dims) return m2n_mesh_size(*src_mesh_dims);
    return rank_offset;
  }

  //! One ShardSpec per tensor (all "rank 0 sends it whole" when not sharded).
  //! @throws config_error naming the entry ("shards[3].dim", "src_placements[2]").
  std::vector<ShardSpec> shard_specs() const { return shard_specs(metas()); }
  //! The same, given metas() (computed once by a caller that needs both).
  std::vector<ShardSpec> shard_specs(const std::vector<TensorMeta>& ms) const {
    check_lengths();
    if (ms.size() != names.size())
      throw config_error("metas", detail::cat("has ", ms.size(), " entries but names has ",
                                              names.size()));
    if (src_placements && !src_mesh_dims)
      throw config_error("src_mesh_dims", "required with src_placements");
    std::vector<ShardSpec> out(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (shards) {
        if ((*shards)[i]) out[i] = *(*shards)[i];
      } else if (src_placements) {
        out[i] = shard_spec_from_m2n(*src_mesh_dims, (*src_placements)[i],
                                     detail::cat("src_placements[", i, "]"));
        if (out[i].split() && out[i].dim >= static_cast<int>(ms[i].shape.size()))
          throw config_error(detail::cat("src_placements[", i, "]"),
                             detail::cat("tensor '", names[i], "' has ", ms[i].shape.size(),
                                         " dims; cannot shard dim ", out[i].dim));
      }
      detail::check_shard(ms[i], i, out[i]);
    }
    return out;
  }

  //! Builds an update info from metadata (dtype names as torch spells them).
  static NcclUpdateInfo from_metas(const std::vector<TensorMeta>& metas) {
    NcclUpdateInfo u;
    for (const auto& m : metas) {
      u.names.push_back(m.name);
      u.dtype_names.emplace_back(dtype_name(m.dtype));
      u.shapes.push_back(m.shape);
    }
    return u;
  }

  //! The ordered metadata. @throws config_error naming the entry ("dtype_names[3]", "shapes[2]").
  std::vector<TensorMeta> metas() const {
    check_lengths();
    std::vector<TensorMeta> out;
    out.reserve(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      TensorMeta m;
      m.name = names[i];
      try {
        m.dtype = parse_dtype(dtype_names[i]);
      } catch (const config_error& e) {
        throw config_error(detail::cat("dtype_names[", i, "]"),
                           "unknown dtype '" + dtype_names[i] + "' for tensor '" + names[i] + "'");
      }
      m.shape = shapes[i];
      for (std::size_t d = 0; d < m.shape.size(); ++d)
        if (m.shape[d] < 0)
          throw config_error(
              detail::cat("shapes[", i, "][", d, "]"),
              detail::cat("negative dim ", m.shape[d], " for tensor '", names[i], "'"));
      try {
        m.validate();
      } catch (const config_error& e) {
        throw config_error(detail::cat("shapes[", i, "]"), e.what());
      }
      out.push_back(std::move(m));
    }
    return out;
  }

  //! @throws config_error naming the first field at fault.
  void validate() const {
    (void)metas();
    if (packed_buffer_size_bytes) detail::check_buffer_size(*packed_buffer_size_bytes);
    if (packed_num_buffers) detail::check_num_buffers(*packed_num_buffers);
    if (shards && (src_mesh_dims || src_placements))
      throw config_error("shards", "give shards or src_mesh_dims/src_placements, not both");
    if (src_mesh_dims && !src_placements)
      throw config_error("src_placements", "required with src_mesh_dims");
    if (num_trainer_ranks && *num_trainer_ranks < 1)
      throw config_error("num_trainer_ranks",
                         detail::cat("must be >= 1, got ", *num_trainer_ranks));
    const int mesh = src_mesh_dims ? m2n_mesh_size(*src_mesh_dims) : 0;
    (void)shard_specs();
    if (num_trainer_ranks && src_mesh_dims && *num_trainer_ranks != mesh)
      throw config_error(
          "num_trainer_ranks",
          detail::cat(*num_trainer_ranks, " trainer ranks, but src_mesh_dims has ", mesh));
    if (delta) {
      if (num_updates_list) throw config_error("delta", "give delta or num_updates_list, not both");
      delta->validate(names.size());
      if (!sharded() && !delta->piece_bytes.empty())
        throw config_error("delta.piece_bytes", "given for an update that is not sharded");
      if (sharded()) {
        if (!num_trainer_ranks && !src_mesh_dims)
          throw config_error("num_trainer_ranks",
                             "a sharded delta says how many trainer ranks send it");
        const auto m = metas();
        const auto specs = shard_specs(m);
        const int trainers = trainer_ranks(0);
        std::vector<std::vector<ShardPiece>> pieces;
        for (std::size_t i = 0; i < m.size(); ++i)
          pieces.push_back(shard_pieces(m[i], i, specs[i], trainers));
        delta->validate_pieces(m, pieces);
      }
    }
    if (num_updates_list) {
      if (sharded()) throw config_error("num_updates_list", "a sparse update has one root");
      detail::check_sparse_counts(*num_updates_list, metas(), "num_updates_list");
    }
  }

  friend bool operator==(const NcclUpdateInfo&, const NcclUpdateInfo&) = default;

 private:
  void check_lengths() const {
    if (dtype_names.size() != names.size())
      throw config_error("dtype_names", detail::cat("has ", dtype_names.size(),
                                                    " entries but names has ", names.size()));
    if (shapes.size() != names.size())
      throw config_error(
          "shapes", detail::cat("has ", shapes.size(), " entries but names has ", names.size()));
    if (shards && shards->size() != names.size())
      throw config_error(
          "shards", detail::cat("has ", shards->size(), " entries but names has ", names.size()));
    if (src_placements && src_placements->size() != names.size())
      throw config_error("src_placements", detail::cat("has ", src_placements->size(),
                                                       " entries but names has ", names.size()));
  }
};

//! The engines' UpdateRequest (engine/adapter.hpp): metadata, shard specs, trainer ranks (when
//! the info says them: num_trainer_ranks or the M2N mesh; else the engine's), packing overrides,
//! the delta and the sparse counts. The context is not needed.
//! @throws config_error naming the entry ("dtype_names[3]", "shards[2].dim", ...).
inline UpdateRequest to_update_request(const NcclUpdateInfo& u, const UpdateContext&) {
  UpdateRequest r;
  r.metas = u.metas();
  // Without shards or placements every spec is "rank 0 sends it whole": nothing to build or check
  // (an unsharded update's metadata is converted once, not twice).
  std::vector<ShardSpec> specs;
  if (u.shards || u.src_placements || u.src_mesh_dims) specs = u.shard_specs(r.metas);
  r.sharded = u.sharded();
  if (r.sharded) {
    if (u.shards || u.src_placements) r.shards = std::move(specs);
    if (u.num_trainer_ranks || u.src_mesh_dims) r.trainer_ranks = u.trainer_ranks(0);
  }
  r.packing = {u.packed, u.packed_buffer_size_bytes, u.packed_num_buffers};
  r.delta = u.delta;
  r.sparse_counts = u.num_updates_list;
  return r;
}

//! The update info of an UpdateRequest, for a worker (TrainerEngine::update_info): names, dtype
//! names, shapes, the packing overrides, num_trainer_ranks when given, `shards` when the request
//! has specs (a default spec, rank 0 sends it whole, as null), the delta and the sparse counts.
inline NcclUpdateInfo to_update_info(const UpdateRequest& r) {
  auto u = NcclUpdateInfo::from_metas(r.metas);
  u.packed = r.packing.packed;
  u.packed_buffer_size_bytes = r.packing.buffer_size_bytes;
  u.packed_num_buffers = r.packing.num_buffers;
  if (r.trainer_ranks) u.num_trainer_ranks = *r.trainer_ranks;
  if (!r.shards.empty()) {
    u.shards.emplace();
    for (const auto& s : r.shards)
      u.shards->push_back(s == ShardSpec{} ? std::nullopt : std::optional<ShardSpec>(s));
  }
  u.delta = r.delta;
  u.num_updates_list = r.sparse_counts;
  return u;
}

}  // namespace weightsync
