// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! UpdateRequest: one weight update in the engines' own terms (no JSON): the ordered tensors, how
//! they are split over the trainer ranks, the packing of this update, and the delta or sparse
//! form. WeightTransferEngine::update_weights and TrainerEngine take it; an adapter converts its
//! own update description to it (vLLM's NcclUpdateInfo / M2NUpdateInfo: <weightsync/vllm.hpp>,
//! see engine/adapter.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/tuning.hpp"

namespace weightsync {

namespace detail {
inline void check_buffer_size(std::int64_t v) {
  if (v < 1) throw config_error("packed_buffer_size_bytes", cat("must be >= 1, got ", v));
}
inline void check_num_buffers(std::int64_t v) {
  if (v < 1 || v > kMaxPackedNumBuffers)
    throw config_error("packed_num_buffers",
                       cat("must be in 1..", kMaxPackedNumBuffers, ", got ", v));
}
}  // namespace detail

//! How a transfer is chunked: packed or not, the chunk size B and the ring depth K (what both
//! sides must agree on; vLLM's packed, packed_buffer_size_bytes, packed_num_buffers).
struct Packing {
  bool packed = false;
  std::int64_t buffer_size_bytes = kDefaultPackedBufferSizeBytes;
  int num_buffers = kDefaultPackedNumBuffers;

  //! @throws config_error("packed_buffer_size_bytes" / "packed_num_buffers").
  void validate() const {
    detail::check_buffer_size(buffer_size_bytes);
    detail::check_num_buffers(num_buffers);
  }
  friend bool operator==(const Packing&, const Packing&) = default;
};

//! An update's own packing, each field overriding the init's when present.
struct PackingOverrides {
  std::optional<bool> packed;
  std::optional<std::int64_t> buffer_size_bytes;
  std::optional<int> num_buffers;

  //! `base` with these overrides applied.
  Packing over(const Packing& base) const {
    return {packed.value_or(base.packed), buffer_size_bytes.value_or(base.buffer_size_bytes),
            num_buffers.value_or(base.num_buffers)};
  }
  //! @throws config_error("packed_buffer_size_bytes" / "packed_num_buffers").
  void validate() const {
    if (buffer_size_bytes) detail::check_buffer_size(*buffer_size_bytes);
    if (num_buffers) detail::check_num_buffers(*num_buffers);
  }
  friend bool operator==(const PackingOverrides&, const PackingOverrides&) = default;
};

//! A delta sync (<weightsync/delta/source.hpp>): the tensors travel as delta blobs against the
//! version the receivers hold. In vLLM's update info JSON (this library's extension):
//! "delta": {"base_version": "v7", "bucket_elems": 16384, "payload_bytes": [n0, n1, ...]}, and for
//! a sharded delta also "piece_bytes": [p0, p1, ...].
struct DeltaUpdate {
  //! The version the blobs apply to; every receiver must hold it (the handshake refuses the
  //! transfer on every rank otherwise). "" for a full sync (nothing to match).
  std::string base_version;
  //! Elements per bucket of the blobs (<weightsync/delta/format.hpp>).
  std::int64_t bucket_elems = 16384;
  //! Per tensor (in the update's order): the delta blob's size in bytes; -1 when the tensor is
  //! sent whole, 0 when it did not change (nothing is sent for it).
  std::vector<std::int64_t> payload_bytes;
  //! A sharded delta (UpdateRequest::sharded, from <weightsync/delta/sharded_source.hpp>): each
  //! trainer rank encodes the pieces it holds. For every tensor with payload_bytes > 0, in order,
  //! one entry per piece of it (shard_pieces order): that piece's blob size, 0 when the piece did
  //! not change; payload_bytes is their sum. Empty for an unsharded delta.
  std::vector<std::int64_t> piece_bytes;

  //! Checks the delta of an update of `tensors` tensors.
  //! @throws config_error naming the field ("delta.bucket_elems", "delta.payload_bytes[3]").
  void validate(std::size_t tensors) const {
    if (bucket_elems < 32 || bucket_elems > 65536 || bucket_elems % 32 != 0)
      throw config_error(
          "delta.bucket_elems",
          detail::cat("must be a multiple of 32 in [32, 65536], got ", bucket_elems));
    if (payload_bytes.size() != tensors)
      throw config_error("delta.payload_bytes", detail::cat("has ", payload_bytes.size(),
                                                            " entries but names has ", tensors));
    for (std::size_t i = 0; i < tensors; ++i)
      if (payload_bytes[i] < -1)
        throw config_error(
            detail::cat("delta.payload_bytes[", i, "]"),
            detail::cat("must be -1 (whole), 0 (unchanged) or a size, got ", payload_bytes[i]));
    if (base_version.empty())
      for (std::size_t i = 0; i < tensors; ++i)
        if (payload_bytes[i] != -1)
          throw config_error(detail::cat("delta.payload_bytes[", i, "]"),
                             "a sync without base_version sends every tensor whole (-1)");
    for (std::size_t k = 0; k < piece_bytes.size(); ++k)
      if (piece_bytes[k] < 0)
        throw config_error(detail::cat("delta.piece_bytes[", k, "]"),
                           detail::cat("must be 0 (unchanged) or a size, got ", piece_bytes[k]));
  }
  //! Checks piece_bytes against the pieces of a sharded delta's tensors (`pieces[i]`: tensor i's,
  //! see shard_pieces): one entry per piece of every tensor sent as blobs, summing to its
  //! payload_bytes, and every such piece contiguous in its tensor (a piece split along a later
  //! dim, with rows of other pieces between its blocks, goes whole).
  //! @throws config_error naming the field and the tensor.
  void validate_pieces(const std::vector<TensorMeta>& metas,
                       const std::vector<std::vector<ShardPiece>>& pieces) const {
    std::size_t k = 0;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (payload_bytes[i] <= 0) continue;
      std::int64_t sum = 0;
      for (const auto& p : pieces[i]) {
        if (k >= piece_bytes.size())
          throw config_error("delta.piece_bytes",
                             detail::cat("has ", piece_bytes.size(), " entries; tensor '",
                                         metas[i].name, "' needs one for each of its ",
                                         pieces[i].size(), " pieces"));
        if (piece_bytes[k] > 0 && !p.contiguous())
          throw config_error(detail::cat("delta.piece_bytes[", k, "]"),
                             detail::cat("a piece of tensor '", metas[i].name,
                                         "' is not contiguous in it (a split along a later dim): "
                                         "it goes whole, not as a blob"));
        sum += piece_bytes[k++];
      }
      if (sum != payload_bytes[i])
        throw config_error(detail::cat("delta.payload_bytes[", i, "]"),
                           detail::cat("tensor '", metas[i].name, "': ", payload_bytes[i],
                                       " bytes, but its pieces' piece_bytes sum to ", sum));
    }
    if (k != piece_bytes.size())
      throw config_error("delta.piece_bytes", detail::cat("has ", piece_bytes.size(),
                                                          " entries for ", k, " pieces"));
  }
  friend bool operator==(const DeltaUpdate&, const DeltaUpdate&) = default;
};

namespace detail {
//! A sparse update's counts (vLLM's sparse_nccl `num_updates_list`): one per tensor, each at most
//! the tensor's elements, which an int32 index must reach. @throws config_error(field[i]).
inline void check_sparse_counts(const std::vector<std::int64_t>& counts,
                                const std::vector<TensorMeta>& metas, const std::string& field) {
  if (counts.size() != metas.size())
    throw config_error(field, cat("has ", counts.size(), " entries but names has ", metas.size()));
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const std::int64_t n = counts[i];
    if (n < 0 || static_cast<std::uint64_t>(n) > metas[i].numel())
      throw config_error(cat(field, "[", i, "]"), cat(n, " updates for tensor '", metas[i].name,
                                                      "' of ", metas[i].numel(), " elements"));
    if (metas[i].numel() > 2147483647ull)
      throw config_error(cat("shapes[", i, "]"), cat("tensor '", metas[i].name,
                                                     "' has more elements than an int32 index "
                                                     "reaches"));
  }
}
}  // namespace detail

//! One weight update: what the receiving engine needs and the sending one announces.
//!
//! Sharding: `sharded` false (and `shards` empty) is trainer rank 0 sending every tensor whole;
//! `sharded` true is a transfer from M trainer ranks (`trainer_ranks`, else the engine's M: its
//! Options::trainer_ranks or the init's rank_offset), each tensor split as its entry of `shards`
//! says (empty: every tensor whole from rank 0, the other trainer ranks taking part).
struct UpdateRequest {
  //! The ordered tensors.
  std::vector<TensorMeta> metas;
  //! Per tensor, how it is split over the trainer ranks; empty: every tensor whole from rank 0.
  std::vector<ShardSpec> shards;
  //! Whether the trainer ranks send as a sharded transfer (see above).
  bool sharded = false;
  //! M, when the update says it; absent: the engine's.
  std::optional<int> trainer_ranks;
  //! This update's packing, over the init's.
  PackingOverrides packing;
  //! A delta sync; absent: every tensor is sent whole.
  std::optional<DeltaUpdate> delta;
  //! A sparse update (vLLM's sparse_nccl): per tensor, the number of (int32 flat index, value)
  //! pairs sent for it, as two broadcasts applied in place.
  std::optional<std::vector<std::int64_t>> sparse_counts;

  //! The spec of every tensor (all "rank 0 sends it whole" when `shards` is empty).
  std::vector<ShardSpec> shard_specs() const {
    return shards.empty() ? std::vector<ShardSpec>(metas.size()) : shards;
  }

  //! Every tensor's pieces with M = `trainers` trainer ranks (shard_pieces).
  //! @throws config_error naming the spec at fault.
  std::vector<std::vector<ShardPiece>> pieces(int trainers) const {
    const auto specs = shard_specs();
    std::vector<std::vector<ShardPiece>> out;
    out.reserve(metas.size());
    for (std::size_t i = 0; i < metas.size(); ++i)
      out.push_back(shard_pieces(metas[i], i, specs[i], trainers));
    return out;
  }

  //! @throws config_error naming the first field at fault ("shards[2].dim", "delta", ...).
  void validate() const {
    for (const auto& m : metas) m.validate();
    packing.validate();
    if (!shards.empty() && shards.size() != metas.size())
      throw config_error(
          "shards", detail::cat("has ", shards.size(), " entries but names has ", metas.size()));
    for (std::size_t i = 0; i < shards.size(); ++i) detail::check_shard(metas[i], i, shards[i]);
    if (trainer_ranks && *trainer_ranks < 1)
      throw config_error("num_trainer_ranks", detail::cat("must be >= 1, got ", *trainer_ranks));
    if (!sharded && (!shards.empty() || trainer_ranks))
      throw config_error("shards",
                         "shards or trainer_ranks given for an update that is not "
                         "sharded");
    if (delta) {
      if (sparse_counts) throw config_error("delta", "give delta or num_updates_list, not both");
      delta->validate(metas.size());
      if (!sharded && !delta->piece_bytes.empty())
        throw config_error("delta.piece_bytes", "given for an update that is not sharded");
      if (sharded) {
        if (!trainer_ranks)
          throw config_error("num_trainer_ranks",
                             "a sharded delta says how many trainer ranks send it");
        delta->validate_pieces(metas, pieces(*trainer_ranks));
      }
    }
    if (sparse_counts) {
      if (sharded) throw config_error("num_updates_list", "a sparse update has one root");
      detail::check_sparse_counts(*sparse_counts, metas, "num_updates_list");
    }
  }
  friend bool operator==(const UpdateRequest&, const UpdateRequest&) = default;
};

}  // namespace weightsync
