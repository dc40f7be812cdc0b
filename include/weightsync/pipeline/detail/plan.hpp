// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The plan of one collective transfer, computed from metadata, shard specs and options alone so
//! that every rank derives the same one. A transfer moves PIECES from M ROOTS: a whole-tensor
//! transfer is M = 1 with one piece per tensor (the whole tensor, from the root rank); a sharded
//! one has trainer ranks 0..M-1 each send the pieces its ShardSpecs give it (shard.hpp).
//!
//! - Each root's pieces, in declared order (tensor, then piece), are cut into chunks by vLLM's rule
//!   over B (chunk_plan_sizes), or one per piece when unpacked.
//! - Step s is one launch (or two, see Split) holding chunk s of every root that has one, so every
//!   root's links carry bytes at once. For M = 1 a step is a chunk.
//! - Within a chunk, pieces of at least direct_threshold_bytes travel as operations of their own
//!   (direct: from their memory, into their destination); the others form the chunk's packed
//!   region. A region whose only non-empty piece is one piece is sent from and received into that
//!   piece's own memory (solo).
//! - The receiving layout of a step without destinations: every root's region, then its direct
//!   pieces, root after root (slot_offset, piece_slot). A consumer with destinations lays out its
//!   own, smaller slot (the schedule does, from the same plan).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
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

//! How a step goes out. The status frames are always in the first launch.
enum class Split : std::uint8_t {
  none,           //!< one launch: status frames, regions, direct pieces
  directs_first,  //!< the first step: the regions' packing overlaps the direct pieces
  region_first,   //!< the last step: the regions' unpacking overlaps the direct pieces
};

struct PiecePlan {
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  //! A root's chunk's packed region: its pieces that are not direct.
  struct Region {
    std::size_t bytes = 0;
    std::size_t solo = npos;  //!< its only non-empty piece (a position in owned[r]), if exactly one
  };

  int trainers = 1;          //!< M, the roots
  bool sharded = false;      //!< shard specs were given: roots are the trainer ranks 0..M-1
  bool framed = true;        //!< Protocol::weightsync: frames around the data
  std::vector<int> root_rank;                   //!< per root: its rank in the group
  std::vector<ShardPiece> pieces;               //!< every piece, tensor-major (rank: the root)
  std::vector<std::size_t> first_piece;         //!< per tensor, into pieces (size n + 1)
  std::vector<std::vector<std::size_t>> owned;  //!< per root: its pieces (indices), in order
  std::vector<std::vector<Chunk>> chunks;       //!< per root: chunks over positions in owned[r]
  std::vector<std::vector<Region>> regions;     //!< per root, per chunk
  std::vector<char> direct;                     //!< per piece
  std::size_t steps = 0;
  std::vector<Split> splits;            //!< per step
  std::vector<std::size_t> step_bytes;  //!< per step: payload bytes (progress)
  //! Byte offset of root r's region in the slot of step s (the layout without destinations):
  //! slot_offset[s * trainers + r]; its direct pieces follow its region.
  std::vector<std::size_t> slot_offset;
  std::size_t slot_bytes = 0;              //!< the largest step in that layout
  std::vector<std::size_t> piece_step;     //!< per piece: the step that carries it
  std::vector<std::size_t> piece_slot;     //!< per piece: its byte offset in its step's slot
  std::vector<std::size_t> complete_step;  //!< per tensor: the step of its last piece
  std::vector<std::vector<std::size_t>> completes;  //!< per step: tensors complete after it
  std::size_t total_bytes = 0;
  std::size_t total_chunks = 0;
  std::uint64_t digest = 0;  //!< sharded: of the resolved pieces and M (the handshake compares)

  //! A whole-tensor transfer: one piece per tensor, all from `root`.
  PiecePlan(std::span<const TensorMeta> metas, int root, const TransferOptions& opt)
      : trainers(1), sharded(false), root_rank{root} {
    framed = opt.protocol == Protocol::weightsync;
    owned.resize(1);
    pieces.reserve(metas.size());
    owned[0].reserve(metas.size());
    for (std::size_t i = 0; i < metas.size(); ++i) {
      const std::size_t nb = metas[i].nbytes();  // validates every shape
      total_bytes += nb;
      first_piece.push_back(i);
      owned[0].push_back(i);
      pieces.push_back(ShardPiece{i, 0, 0, 1, 0, 1, nb, nb});
    }
    first_piece.push_back(pieces.size());
    build(opt);
  }

  //! A sharded transfer: trainer ranks 0..m-1, `specs` one per tensor.
  PiecePlan(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs, int m,
            const TransferOptions& opt)
      : trainers(m), sharded(true) {
    framed = opt.protocol == Protocol::weightsync;
    if (m < 1) throw config_error("trainers", cat("must be >= 1, got ", m));
    if (specs.size() != metas.size())
      throw config_error("shards", cat("has ", specs.size(), " entries for ", metas.size(),
                                       " tensors (one spec per tensor)"));
    for (int r = 0; r < m; ++r) root_rank.push_back(r);
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
    build(opt);
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
  const Region& region(int r, std::size_t s) const {
    return regions[static_cast<std::size_t>(r)][s];
  }
  std::size_t offset(std::size_t s, int r) const {
    return slot_offset[s * static_cast<std::size_t>(trainers) + static_cast<std::size_t>(r)];
  }
  //! The piece at position `pos` of root r's list.
  std::size_t piece_index(int r, std::size_t pos) const {
    return owned[static_cast<std::size_t>(r)][pos];
  }
  const ShardPiece& piece_at(int r, std::size_t pos) const { return pieces[piece_index(r, pos)]; }
  //! The root index of `rank`, or -1 when it is not a root.
  int root_of(int rank) const {
    for (std::size_t r = 0; r < root_rank.size(); ++r)
      if (root_rank[r] == rank) return static_cast<int>(r);
    return -1;
  }
  //! Bytes root r sends in all (what its eager bytes must hold).
  std::size_t root_bytes(int r) const {
    std::size_t b = 0;
    for (const auto& c : chunks[static_cast<std::size_t>(r)]) b += c.bytes;
    return b;
  }
  //! The most pieces one chunk holds (to size per-chunk lists once).
  std::size_t max_chunk_pieces() const {
    std::size_t most = 0;
    for (const auto& rc : chunks)
      for (const auto& c : rc) most = std::max(most, c.size());
    return most;
  }
  //! Root r's slot: the largest region of r that has to be packed (more than one piece).
  std::size_t packing_bytes(int r) const {
    std::size_t s = 0;
    for (const auto& g : regions[static_cast<std::size_t>(r)])
      if (g.solo == npos) s = std::max(s, g.bytes);
    return s;
  }

 private:
  void build(const TransferOptions& opt) {
    if (!framed && opt.direct_threshold_bytes > 0)
      throw config_error("direct_threshold_bytes", "is not part of vLLM's wire (Protocol::vllm)");
    chunk_roots(opt);
    mark_direct(opt);
    lay_out_steps(opt);
  }

  void chunk_roots(const TransferOptions& opt) {
    chunks.resize(owned.size());
    std::vector<std::size_t> sizes;
    for (std::size_t r = 0; r < owned.size(); ++r) {
      sizes.clear();
      for (auto idx : owned[r]) sizes.push_back(pieces[idx].bytes());
      if (opt.packed) {
        chunks[r] = chunk_plan_sizes(sizes, opt.buffer_size_bytes);
      } else {
        chunks[r].reserve(sizes.size());
        for (std::size_t p = 0; p < sizes.size(); ++p) chunks[r].push_back({p, p + 1, sizes[p]});
      }
      steps = std::max(steps, chunks[r].size());
      total_chunks += chunks[r].size();
    }
  }

  void mark_direct(const TransferOptions& opt) {
    direct.assign(pieces.size(), 0);
    regions.resize(owned.size());
    for (std::size_t r = 0; r < owned.size(); ++r) {
      regions[r].assign(chunks[r].size(), Region{});
      for (std::size_t c = 0; c < chunks[r].size(); ++c) {
        std::size_t nonzero = 0;
        Region& g = regions[r][c];
        for (std::size_t p = chunks[r][c].begin; p < chunks[r][c].end; ++p) {
          const std::size_t idx = owned[r][p];
          const std::size_t nb = pieces[idx].bytes();
          direct[idx] = framed && opt.direct_threshold_bytes > 0 && nb >= opt.direct_threshold_bytes;
          if (direct[idx] || nb == 0) continue;
          g.bytes += nb;
          g.solo = p;
          ++nonzero;
        }
        if (nonzero != 1) g.solo = npos;
      }
    }
  }

  void lay_out_steps(const TransferOptions& opt) {
    const auto m = static_cast<std::size_t>(trainers);
    slot_offset.assign(steps * m, 0);
    splits.assign(steps, Split::none);
    step_bytes.assign(steps, 0);
    piece_step.assign(pieces.size(), 0);
    piece_slot.assign(pieces.size(), 0);
    for (std::size_t s = 0; s < steps; ++s) {
      std::size_t off = 0;
      bool has_direct = false, large_region = false;
      for (std::size_t r = 0; r < m; ++r) {
        slot_offset[s * m + r] = off;
        if (s >= chunks[r].size()) continue;
        const Chunk& c = chunks[r][s];
        step_bytes[s] += c.bytes;
        const Region& g = regions[r][s];
        large_region = large_region || (g.bytes >= opt.split_min_region_bytes && g.solo == npos);
        std::size_t region_at = off, direct_at = off + g.bytes;
        for (std::size_t p = c.begin; p < c.end; ++p) {
          const std::size_t idx = owned[r][p];
          piece_step[idx] = s;
          if (direct[idx]) {
            has_direct = true;
            piece_slot[idx] = direct_at;
            direct_at += pieces[idx].bytes();
          } else {
            piece_slot[idx] = region_at;
            region_at += pieces[idx].bytes();
          }
        }
        off = direct_at;
      }
      slot_bytes = std::max(slot_bytes, off);
      if (has_direct && large_region) {
        if (s == 0)
          splits[s] = Split::directs_first;
        else if (s + 1 == steps)
          splits[s] = Split::region_first;
      }
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

//! A workspace's last whole-tensor plan, kept while the metadata (its digest and byte count, from
//! the caller's MetadataDigestCache), the root and the options a plan depends on stay the same: a
//! sync like the last one (the usual case) builds nothing (504 tensors: about 14 us on this
//! project's CI machine, warm). Sharded plans are built each time.
class PlanCache {
 public:
  template <class DigestCache>
  std::shared_ptr<const PiecePlan> whole(std::span<const TensorMeta> metas, int root,
                                         const TransferOptions& opt, DigestCache& digests) {
    const auto summary = digests.of(metas);  // (validates every shape)
    const Key k{summary.digest,         summary.bytes,
                metas.size(),           root,
                opt.protocol,           opt.packed,
                opt.buffer_size_bytes,  opt.direct_threshold_bytes,
                opt.split_min_region_bytes};
    digest_ = summary.digest;
    if (plan_ && k == key_) return plan_;
    plan_.reset();
    plan_ = std::make_shared<const PiecePlan>(metas, root, opt);
    key_ = k;
    return plan_;
  }
  //! The metadata digest of the list the last whole() was given (valid after it returned).
  std::uint64_t last_digest() const noexcept { return digest_; }

 private:
  struct Key {
    std::uint64_t digest = 0, bytes = 0;
    std::size_t count = 0;
    int root = 0;
    Protocol protocol = Protocol::weightsync;
    bool packed = false;
    std::size_t buffer = 0, direct = 0, split = 0;
    bool operator==(const Key&) const = default;
  };
  Key key_;
  std::shared_ptr<const PiecePlan> plan_;
  std::uint64_t digest_ = 0;
};

//! Checks that `root` is in the group and that this rank's role fits it (whole-tensor transfers).
inline void check_root(int root, int rank, int size, bool producer) {
  if (root < 0 || root >= size)
    throw config_error("root", cat("must be in 0..", size - 1, ", got ", root));
  if (producer && rank != root)
    throw config_error(
        "root", cat("the producer must run on the root rank ", root, ", this is rank ", rank));
  if (!producer && rank == root)
    throw config_error("root", cat("the consumer must not run on the root rank ", root));
}

//! Checks the roles of a sharded transfer: trainer ranks 0..trainers-1 produce, the others
//! consume, on vLLM's wire never (it has one sender).
inline void check_trainers(int trainers, int rank, int size, bool producer,
                           const TransferOptions& opt) {
  if (opt.protocol != Protocol::weightsync)
    throw config_error("protocol",
                       "sharded transfers need Protocol::weightsync (vLLM's wire has one sender)");
  if (trainers < 1 || trainers >= size)
    throw config_error("trainers", cat("must be in 1..", size - 1, " (the group has ", size,
                                       " ranks), got ", trainers));
  if (producer && rank >= trainers)
    throw config_error("trainers", cat("the producer runs on trainer ranks 0..", trainers - 1,
                                       "; this is rank ", rank));
  if (!producer && rank < trainers)
    throw config_error("trainers", cat("the consumer must not run on a trainer rank (0..",
                                       trainers - 1, "); this is rank ", rank));
}

//! A consumer's workspace places for the split tensors without a destination (`dest` null, more
//! than one piece): each holds its place from the step of its first piece to the step of its last
//! (when it is loaded); a place is reused by a tensor whose first piece comes later (all unpacking
//! and loading is then in one stream order), unless `all_at_once` (the eager path lands every
//! piece in one go). Fills `offsets` (npos: no place); @returns the bytes.
inline std::size_t place_assembly(const PiecePlan& plan, std::span<const TensorMeta> metas,
                                  const std::vector<std::byte*>& dest,
                                  std::vector<std::size_t>& offsets, bool all_at_once = false) {
  offsets.assign(metas.size(), PiecePlan::npos);
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
    std::size_t fit = PiecePlan::npos;
    for (std::size_t k = 0; k < places.size() && !all_at_once; ++k)
      if (places[k].busy_until < first && places[k].bytes >= nb &&
          (fit == PiecePlan::npos || places[k].bytes < places[fit].bytes))
        fit = k;
    if (fit == PiecePlan::npos) {
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
