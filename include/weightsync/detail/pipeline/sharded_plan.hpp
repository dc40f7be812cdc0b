// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The plan of one sharded transfer (M trainer ranks, each the root of the pieces it holds),
//! computed from metadata, shard specs and options alone so that every rank derives the same one:
//! each root's pieces in declared order (tensor, then piece), packed into chunks by vLLM's rule
//! over B (or one per piece when unpacked); step s carries chunk s of every root that has one, all
//! in one launch; the ring slot of a step holds every root's region of it back to back; and the
//! step at which each tensor is complete.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "weightsync/chunk_plan.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/detail/hash.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync::detail {

struct ShardedPlan {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  int trainers = 1;
  std::vector<ShardPiece> pieces;               //!< every piece, tensor-major
  std::vector<std::size_t> first_piece;         //!< per tensor, into pieces (size n + 1)
  std::vector<std::vector<std::size_t>> owned;  //!< per root: its pieces (indices), in order
  std::vector<std::vector<Chunk>> chunks;       //!< per root: chunks over positions in owned[r]
  std::size_t steps = 0;
  //! Byte offset of root r's region in the slot of step s: slot_offset[s * trainers + r].
  std::vector<std::size_t> slot_offset;
  std::size_t slot_bytes = 0;              //!< the largest step (sum of its roots' regions)
  std::vector<std::size_t> piece_step;     //!< per piece: the step that carries it
  std::vector<std::size_t> piece_slot;     //!< per piece: its byte offset in its step's slot
  std::vector<std::size_t> complete_step;  //!< per tensor: the step of its last piece
  std::vector<std::vector<std::size_t>> completes;  //!< per step: tensors complete after it
  std::size_t total_bytes = 0;
  std::size_t total_chunks = 0;
  std::uint64_t digest = 0;  //!< of the resolved pieces and M (compared in the handshake)

  ShardedPlan(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, int m,
              const TransferOptions& opt)
      : trainers(m) {
    if (m < 1) throw config_error("trainers", cat("must be >= 1, got ", m));
    if (specs.size() != metas.size())
      throw config_error("shards", cat("has ", specs.size(), " entries for ", metas.size(),
                                       " tensors (one spec per tensor)"));
    owned.resize(static_cast<std::size_t>(m));
    for (std::size_t i = 0; i < metas.size(); ++i) {
      total_bytes += metas[i].nbytes();  // validates every shape
      first_piece.push_back(pieces.size());
      for (const auto& p : shard_pieces(metas[i], i, specs[i], m)) {
        owned[static_cast<std::size_t>(p.rank)].push_back(pieces.size());
        pieces.push_back(p);
      }
    }
    first_piece.push_back(pieces.size());
    chunk_roots(opt);
    lay_out_steps();
    digest = pieces_digest();
  }

  std::size_t num_pieces(std::size_t tensor) const {
    return first_piece[tensor + 1] - first_piece[tensor];
  }
  //! Root r's chunk at step s, or nullptr when r has no chunk s.
  const Chunk* chunk(int r, std::size_t s) const {
    const auto& c = chunks[static_cast<std::size_t>(r)];
    return s < c.size() ? &c[s] : nullptr;
  }
  std::size_t offset(std::size_t s, int r) const {
    return slot_offset[s * static_cast<std::size_t>(trainers) + static_cast<std::size_t>(r)];
  }
  const ShardPiece& piece_at(int r, std::size_t pos) const {
    return pieces[owned[static_cast<std::size_t>(r)][pos]];
  }
  //! The only non-empty piece of a chunk (as a position in owned[r]), or npos.
  std::size_t solo(int r, const Chunk& c) const {
    std::size_t found = npos, nonzero = 0;
    for (std::size_t p = c.begin; p < c.end; ++p)
      if (piece_at(r, p).bytes() > 0) {
        found = p;
        ++nonzero;
      }
    return nonzero == 1 ? found : npos;
  }
  //! The most pieces one chunk holds (to size per-chunk lists once).
  std::size_t max_chunk_pieces() const {
    std::size_t most = 0;
    for (const auto& rc : chunks)
      for (const auto& c : rc) most = std::max(most, c.size());
    return most;
  }

 private:
  void chunk_roots(const TransferOptions& opt) {
    chunks.resize(owned.size());
    for (std::size_t r = 0; r < owned.size(); ++r) {
      std::vector<std::size_t> sizes;
      for (auto idx : owned[r]) sizes.push_back(pieces[idx].bytes());
      if (opt.packed) {
        chunks[r] = chunk_plan_sizes(sizes, opt.buffer_size_bytes);
      } else {
        for (std::size_t p = 0; p < sizes.size(); ++p) chunks[r].push_back({p, p + 1, sizes[p]});
      }
      steps = std::max(steps, chunks[r].size());
      total_chunks += chunks[r].size();
    }
  }

  void lay_out_steps() {
    const auto m = static_cast<std::size_t>(trainers);
    slot_offset.assign(steps * m, 0);
    piece_step.assign(pieces.size(), 0);
    piece_slot.assign(pieces.size(), 0);
    for (std::size_t s = 0; s < steps; ++s) {
      std::size_t off = 0;
      for (std::size_t r = 0; r < m; ++r) {
        slot_offset[s * m + r] = off;
        if (s >= chunks[r].size()) continue;
        for (std::size_t p = chunks[r][s].begin; p < chunks[r][s].end; ++p) {
          piece_step[owned[r][p]] = s;
          piece_slot[owned[r][p]] = off;
          off += pieces[owned[r][p]].bytes();
        }
      }
      slot_bytes = std::max(slot_bytes, off);
    }
    const std::size_t n = first_piece.size() - 1;
    complete_step.assign(n, 0);
    completes.assign(steps, {});
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t p = first_piece[i]; p < first_piece[i + 1]; ++p)
        complete_step[i] = std::max(complete_step[i], piece_step[p]);
      if (steps > 0) completes[complete_step[i]].push_back(i);
    }
  }

  std::uint64_t pieces_digest() const {
    Hash64 h;
    h.u64(static_cast<std::uint64_t>(trainers)).u64(pieces.size());
    for (const auto& p : pieces)
      h.u64(p.tensor)
          .u64(static_cast<std::uint64_t>(p.rank))
          .u64(static_cast<std::uint64_t>(p.begin))
          .u64(static_cast<std::uint64_t>(p.end))
          .u64(p.blocks)
          .u64(p.block_bytes)
          .u64(p.pitch);
    return h.value();
  }
};

//! A consumer's workspace places for the split tensors without a destination (`dest` null, more
//! than one piece): each holds its place from the step of its first piece to the step of its last
//! (when it is loaded); a place is reused by a tensor whose first piece comes later (all unpacking
//! and loading is in one stream order). Fills `offsets` (npos: no place); @returns the bytes.
inline std::size_t place_assembly(const ShardedPlan& plan, std::span<const TensorMeta> metas,
                                  const std::vector<std::byte*>& dest,
                                  std::vector<std::size_t>& offsets) {
  offsets.assign(metas.size(), ShardedPlan::npos);
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (first step, tensor)
  for (std::size_t i = 0; i < metas.size(); ++i) {
    if (dest[i] || plan.num_pieces(i) < 2 || metas[i].nbytes() == 0) continue;
    std::size_t first = plan.complete_step[i];
    for (std::size_t p = plan.first_piece[i]; p < plan.first_piece[i + 1]; ++p)
      first = std::min(first, plan.piece_step[p]);
    order.emplace_back(first, i);
  }
  std::sort(order.begin(), order.end());
  struct Place {
    std::size_t offset, bytes, busy_until;
  };
  std::vector<Place> places;
  std::size_t need = 0;
  for (const auto& [first, i] : order) {
    const std::size_t nb = (metas[i].nbytes() + 255) / 256 * 256;
    std::size_t fit = ShardedPlan::npos;
    for (std::size_t k = 0; k < places.size(); ++k)
      if (places[k].busy_until < first && places[k].bytes >= nb &&
          (fit == ShardedPlan::npos || places[k].bytes < places[fit].bytes))
        fit = k;
    if (fit == ShardedPlan::npos) {
      fit = places.size();
      places.push_back({need, nb, 0});
      need += nb;
    }
    places[fit].busy_until = plan.complete_step[i];
    offsets[i] = places[fit].offset;
  }
  return need;
}

}  // namespace weightsync::detail
