// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! ShardedDeltaSource: delta syncs from a sharded trainer (FSDP / TP ranks that each hold pieces
//! of the tensors: a ShardedWeightSource, see engine/trainer.hpp). Each trainer rank keeps a
//! reference of the pieces it holds and diffs them; the ranks then share what they found, one
//! DeltaPart each (a few bytes per piece), through the trainer's own group
//! (torch.distributed.all_gather_object, MPI_Allgather of DeltaPart::serialize(), ...); from all
//! parts every rank derives the same round:
//! - a tensor goes whole (its pieces from their ranks, as a plain sharded transfer sends them)
//!   when any of its pieces is dense, or is not contiguous in the tensor (a split along a later
//!   dim: its blocks have other pieces' rows between them);
//! - otherwise each changed piece travels as its own blob, from the rank that holds it, and is
//!   applied in place at the piece's elements of the receiver's tensor (DeltaUpdate::piece_bytes);
//! - the whole round goes whole when any rank asks (no reference yet, metadata changed, a round
//!   not committed, an anchor), and the parts must agree on the base version.
//!
//! A round, on every trainer rank m of M:
//! @code
//!   ShardedDeltaSource d(shards, m, M);
//!   DeltaPart mine = d.measure("v8");
//!   std::vector<DeltaPart> parts = all_gather(mine);   // the trainer's own group
//!   UpdateRequest info = d.prepare(parts, trainer.update_request(d.tensors(), d.tensor_specs()));
//!   // rank 0 sends `info` to the workers, which call update_weights(info, ...)
//!   trainer.send_weights(d);
//!   d.commit();
//! @endcode
//!
//! Bit-exact as DeltaSource is: the references are only ever what the receivers were sent, and
//! the handshake refuses a delta on every rank when a receiver holds another base version.
//! Reference memory: a full copy of this rank's contiguous pieces (DeltaReference::low_byte: 1 +
//! 8/256 bytes per 2-byte element); pieces that always go whole keep none.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weightsync/delta/source.hpp"
#include "weightsync/shard.hpp"

namespace weightsync {

//! What one trainer rank found in its pieces (ShardedDeltaSource::measure), for the others.
struct DeltaPart {
  int rank = 0;
  std::string version;  //!< the round's version
  std::string base;     //!< the version this rank's reference holds ("" none)
  bool whole = false;   //!< this rank needs the round whole
  //! Per piece this rank holds, in its iteration order: -1 dense (or not contiguous: whole),
  //! 0 unchanged, else the blob's size in bytes. Empty when `whole`.
  std::vector<std::int64_t> piece_bytes;

  //! A text form for any byte transport of the trainer's group: `parse` reads it back.
  std::string serialize() const {
    std::string s = detail::cat("weightsync-delta-part 1 ", rank, " ", whole ? 1 : 0, " ",
                                version.size(), ":", version, " ", base.size(), ":", base, " ",
                                piece_bytes.size());
    for (auto b : piece_bytes) s += detail::cat(" ", b);
    return s;
  }
  //! @throws config_error("delta part", what is wrong and where) for anything else.
  static DeltaPart parse(std::string_view text) {
    std::size_t at = 0;
    const auto fail = [&](const char* what) -> config_error {
      return config_error("delta part", detail::cat(what, " at byte ", at, " of ", text.size()));
    };
    const auto word = [&](std::string_view want) {
      if (text.substr(at, want.size()) != want) throw fail("not a weightsync delta part");
      at += want.size();
    };
    const auto integer = [&](std::int64_t lo) {
      std::int64_t v = 0;
      const auto* b = text.data() + at;
      const auto r = std::from_chars(b, text.data() + text.size(), v);
      if (r.ec != std::errc() || r.ptr == b || v < lo) throw fail("a bad number");
      at += static_cast<std::size_t>(r.ptr - b);
      return v;
    };
    const auto space = [&] {
      if (at >= text.size() || text[at] != ' ') throw fail("a missing space");
      ++at;
    };
    const auto string = [&] {
      const auto n = static_cast<std::size_t>(integer(0));
      word(":");
      if (n > text.size() - at) throw fail("a string past the end");
      std::string s(text.substr(at, n));
      at += n;
      return s;
    };
    DeltaPart p;
    word("weightsync-delta-part 1 ");
    p.rank = static_cast<int>(std::min<std::int64_t>(integer(0), 1 << 30));
    space();
    const auto w = integer(0);
    if (w > 1) throw fail("whole is not 0 or 1");
    p.whole = w == 1;
    space();
    p.version = string();
    space();
    p.base = string();
    space();
    const auto n = static_cast<std::size_t>(integer(0));
    if (n > text.size()) throw fail("more pieces than the text could hold");
    p.piece_bytes.reserve(n);
    for (std::size_t k = 0; k < n; ++k) {
      space();
      p.piece_bytes.push_back(integer(-1));
    }
    if (at != text.size()) throw fail("trailing bytes");
    return p;
  }
  friend bool operator==(const DeltaPart&, const DeltaPart&) = default;
};

//! A sharded source (S: metas(), shard_specs(), and iterate() over the pieces this rank holds,
//! see ShardedWeightSource) sent as deltas. Models ShardedWeightSource itself: metas(),
//! shard_specs() and iterate() are the prepared round's wire. One round at a time.
template <class S, class Codec = HostDeltaCodec>
  requires requires(S& s) {
    { s.metas() } -> std::convertible_to<std::vector<TensorMeta>>;
    { s.shard_specs() } -> std::convertible_to<std::vector<ShardSpec>>;
  }
class ShardedDeltaSource {
 public:
  //! @throws config_error for bad options (as DeltaSource), or a rank outside 0..trainers-1.
  ShardedDeltaSource(S& source, int trainer_rank, int trainers, DeltaOptions opt = {},
                     Codec codec = Codec())
      : src_(source), me_(trainer_rank), m_(trainers), opt_(opt), codec_(std::move(codec)) {
    if (m_ < 1) throw config_error("trainers", detail::cat("must be >= 1, got ", m_));
    if (me_ < 0 || me_ >= m_)
      throw config_error("trainer_rank",
                         detail::cat("must be in 0..", m_ - 1, ", got ", me_));
    detail::check_delta_options(opt_, kLowByte);
  }

  //! Step 1: diffs this rank's pieces against its reference for the round that makes `version`.
  //! @throws config_error for an empty version, or a source that does not yield its pieces.
  DeltaPart measure(std::string version) {
    if (version.empty()) throw config_error("version", "a delta round needs a version name");
    const auto started = std::chrono::steady_clock::now();
    layout();
    collect();
    const bool whole = round_.whole(opt_.anchor_every) || ref_metas_ != metas_ ||
                       ref_specs_ != specs_ || opt_.mode == DeltaMode::never;
    round_.begin(std::move(version));
    prepared_ = false;
    refs_hold_target_ = false;
    stats_ = DeltaStats{};
    mine_ = DeltaPart{me_, round_.target, round_.has_ref ? round_.base : std::string(), whole, {}};
    job_of_.assign(own_.size(), kNoJob);
    if (!whole) {
      std::vector<delta::DeltaJob> jobs;
      for (std::size_t k = 0; k < own_.size(); ++k) {
        const ShardPiece& p = piece(k);
        if (!p.contiguous()) continue;  // (always whole: no reference)
        job_of_[k] = jobs.size();
        const TensorMeta& t = metas_[own_[k].tensor];
        jobs.push_back({data_[k], Codec::data(refs_[k]), numel(k),
                        static_cast<unsigned>(dtype_size(t.dtype)), low_byte(t)});
      }
      sizes_ = codec_.measure(jobs, opt_.bucket_elems);
      refs_hold_target_ = kMeasureUpdates;
      stats_.changed_elements = codec_.changed_elements();
      if constexpr (kLowByte) stats_.failed_blocks = codec_.failed_blocks();
      for (std::size_t k = 0; k < own_.size(); ++k) {
        const std::uint64_t full = piece(k).bytes();
        std::int64_t b = -1;
        if (full == 0) {
          b = 0;
        } else if (job_of_[k] != kNoJob) {
          const std::uint64_t size = sizes_[job_of_[k]];
          if (size == delta::blob_prefix_bytes(delta::bucket_count(numel(k), opt_.bucket_elems)))
            b = 0;  // (only its header and directory: nothing changed)
          else if (size < full && (opt_.mode == DeltaMode::always ||
                                   static_cast<double>(size) <=
                                       opt_.max_payload_fraction * static_cast<double>(full)))
            b = static_cast<std::int64_t>(size);
        }
        mine_.piece_bytes.push_back(b);
      }
    }
    measure_time_ = std::chrono::steady_clock::now() - started;
    return mine_;
  }

  //! Step 2, with every trainer rank's part (any order, one per rank): encodes this rank's blobs
  //! and returns `info` (TrainerEngine::update_request(tensors(), tensor_specs())) with its delta:
  //! the same on every rank. Every receiver must be given it.
  //! @throws config_error naming the rank whose part disagrees (another version or base, a
  //!   count of pieces that is not its own), or an `info` that does not describe the source.
  UpdateRequest prepare(std::span<const DeltaPart> parts, UpdateRequest info) {
    if (!round_.pending || prepared_)
      throw state_error("ShardedDeltaSource::prepare without measure (or twice)");
    const auto started = std::chrono::steady_clock::now();
    if (info.metas != metas_)
      throw config_error("info", "the update info does not describe the source's tensors");
    if (!info.sharded || info.shard_specs() != specs_ || info.trainer_ranks.value_or(0) != m_)
      throw config_error("info",
                         detail::cat("the update info is not this source's sharded transfer from ",
                                     m_, " trainer ranks (TrainerEngine::update_request(metas, "
                                         "specs) with trainer_world ",
                                     m_, ")"));
    std::vector<const DeltaPart*> by_rank(static_cast<std::size_t>(m_), nullptr);
    if (parts.size() != by_rank.size())
      throw config_error("parts", detail::cat(parts.size(), " parts for ", m_, " trainer ranks"));
    for (const auto& p : parts) {
      if (p.rank < 0 || p.rank >= m_ || by_rank[static_cast<std::size_t>(p.rank)])
        throw config_error("parts", detail::cat("rank ", p.rank, " is outside 0..", m_ - 1,
                                                " or given twice"));
      by_rank[static_cast<std::size_t>(p.rank)] = &p;
    }
    if (*by_rank[static_cast<std::size_t>(me_)] != mine_)
      throw config_error("parts", detail::cat("rank ", me_, "'s part is not what this rank measured"));
    bool whole = false;
    for (const auto* p : by_rank) {
      if (p->version != round_.target)
        throw config_error("parts", detail::cat("rank ", p->rank, " measured version '", p->version,
                                                "', rank ", me_, " '", round_.target, "'"));
      whole = whole || p->whole;
    }
    std::vector<std::size_t> held(by_rank.size(), 0);  // pieces per rank
    for (const auto& ps : pieces_)
      for (const auto& p : ps) ++held[static_cast<std::size_t>(p.rank)];
    if (!whole)
      for (const auto* p : by_rank) {
        if (p->base != mine_.base)
          throw config_error("parts", detail::cat("rank ", p->rank, " holds base '", p->base,
                                                  "', rank ", me_, " '", mine_.base,
                                                  "': the ranks did not commit the same rounds"));
        if (p->piece_bytes.size() != held[static_cast<std::size_t>(p->rank)])
          throw config_error("parts", detail::cat("rank ", p->rank, " gives ",
                                                  p->piece_bytes.size(), " pieces; it holds ",
                                                  held[static_cast<std::size_t>(p->rank)]));
      }
    DeltaUpdate d;
    d.bucket_elems = opt_.bucket_elems;
    d.payload_bytes.assign(metas_.size(), -1);
    blob_at_.assign(own_.size(), kNoJob);
    std::uint64_t arena = 0;
    if (!whole) {
      d.base_version = mine_.base;
      std::vector<std::size_t> next(by_rank.size(), 0);  // each rank's next piece entry
      std::size_t own_at = 0;
      for (std::size_t i = 0; i < metas_.size(); ++i) {
        std::vector<std::int64_t> entries;
        bool dense = false;
        std::int64_t sum = 0;
        for (const auto& p : pieces_[i]) {
          const auto r = static_cast<std::size_t>(p.rank);
          const std::int64_t b = by_rank[r]->piece_bytes[next[r]++];
          entries.push_back(b);
          dense = dense || b < 0 || (b > 0 && !p.contiguous());
          sum += std::max<std::int64_t>(b, 0);
        }
        d.payload_bytes[i] = dense ? -1 : sum;
        if (!dense && sum > 0) {
          d.piece_bytes.insert(d.piece_bytes.end(), entries.begin(), entries.end());
          for (std::size_t k = 0; k < pieces_[i].size(); ++k) {
            if (pieces_[i][k].rank != me_) continue;
            while (own_at < own_.size() && !(own_[own_at].tensor == i && own_[own_at].piece == k))
              ++own_at;
            if (entries[k] > 0) {
              blob_at_[own_at] = arena;
              arena += static_cast<std::uint64_t>(entries[k]);
            }
          }
        }
      }
      if (arena > blobs_.size()) {
        blobs_ = typename Codec::Buffer{};
        blobs_ = codec_.alloc(arena);
      }
      std::vector<void*> outs(sizes_.size(), nullptr);
      for (std::size_t k = 0; k < own_.size(); ++k)
        if (blob_at_[k] != kNoJob) outs[job_of_[k]] = Codec::data(blobs_) + blob_at_[k];
      codec_.encode(outs);
    }
    info.delta = std::move(d);
    info.validate();
    wire_ = wire_cache_.get(info, mine_.base);
    delta_ = *info.delta;
    whole_round_ = whole;
    items();
    // stats: this rank's pieces
    stats_.whole_round = whole;
    for (std::size_t k = 0; k < own_.size(); ++k) {
      const std::uint64_t full = piece(k).bytes();
      stats_.tensor_bytes += full;
      const std::int64_t tensor = delta_.payload_bytes[own_[k].tensor];
      if (tensor == -1) {
        ++stats_.whole;
        stats_.wire_bytes += full;
      } else if (blob_at_[k] == kNoJob) {
        ++stats_.unchanged;
      } else {
        ++stats_.blobs;
        stats_.wire_bytes += static_cast<std::uint64_t>(mine_.piece_bytes[k]);
      }
    }
    stats_.encode = std::chrono::duration_cast<std::chrono::nanoseconds>(
        measure_time_ + (std::chrono::steady_clock::now() - started));
    prepared_ = true;
    return info;
  }
  //! The same for an adapter's update description, returned in its own form (vLLM's
  //! NcclUpdateInfo with <weightsync/vllm.hpp>).
  template <UpdateInfo Info>
    requires(!std::same_as<Info, UpdateRequest>)
  auto prepare(std::span<const DeltaPart> parts, const Info& info)
      -> decltype(to_update_info(std::declval<const typename detail::dependent_type<
                                     UpdateRequest, Info>::type&>())) {
    return to_update_info(prepare(parts, to_update_request(info, UpdateContext{})));
  }

  //! The source's tensors and specs (what TrainerEngine::update_request is given).
  std::vector<TensorMeta> tensors() const { return src_.metas(); }
  std::vector<ShardSpec> tensor_specs() const { return src_.shard_specs(); }

  //! The prepared round's wire (ShardedWeightSource).
  const std::vector<TensorMeta>& metas() const { return wire_->metas; }
  const std::vector<ShardSpec>& shard_specs() const { return wire_->specs; }
  //! This rank's items of the prepared round: the marker (rank 0), its pieces of the tensors that
  //! go whole, its blobs.
  AnyTensorRange iterate() {
    if (!prepared_) throw state_error("ShardedDeltaSource::iterate before prepare");
    return AnyTensorRange([this, k = std::size_t{0}](SourceTensorRef& out) mutable {
      if (k >= items_.size()) return false;
      out = items_[k++];
      return true;
    });
  }

  //! The prepared round landed on every rank: this rank's references become it, and its version
  //! the next round's base. Every trainer rank must commit the same rounds (prepare checks).
  void commit() {
    if (!prepared_) throw state_error("ShardedDeltaSource::commit without a prepared round");
    const auto started = std::chrono::steady_clock::now();
    alloc_refs();
    for (std::size_t k = 0; k < own_.size() && !refs_hold_target_; ++k) {
      if (!piece(k).contiguous()) continue;
      const TensorMeta& t = metas_[own_[k].tensor];
      if (low_byte(t)) {  // a delta round's measure updated it already
        if (whole_round_) seed_ref(k);
        continue;
      }
      if (delta_.payload_bytes[own_[k].tensor] == -1)
        codec_.copy(Codec::data(refs_[k]), data_[k], piece(k).bytes());
      else if (blob_at_[k] != kNoJob)
        codec_.apply(Codec::data(blobs_) + blob_at_[k],
                     static_cast<std::uint64_t>(mine_.piece_bytes[k]), Codec::data(refs_[k]),
                     numel(k), static_cast<unsigned>(dtype_size(t.dtype)), t.name);
    }
    codec_.finish();
    round_.committed(true);
    prepared_ = false;
    stats_.commit = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::steady_clock::now() - started);
  }

  //! Forgets the reference's standing: the next round goes whole.
  void invalidate() { round_.has_ref = false; }

  //! The receivers already hold the source's current tensors as `version`: this rank's pieces
  //! become the reference without a round (every trainer rank seeds the same version).
  void seed(std::string version) {
    if (version.empty()) throw config_error("version", "a seed needs a version name");
    layout();
    collect();
    alloc_refs();
    for (std::size_t k = 0; k < own_.size(); ++k)
      if (piece(k).contiguous()) seed_ref(k);
    codec_.finish();
    round_.seeded(std::move(version));
    prepared_ = false;
  }

  const std::string& base_version() const { return round_.base; }
  //! This rank's share of the last round (its pieces' bytes, wire bytes and counts).
  const DeltaStats& stats() const { return stats_; }
  //! The reference's memory on this rank, in bytes.
  std::uint64_t reference_bytes() const {
    std::uint64_t n = 0;
    for (const auto& r : refs_) n += r.size();
    return n;
  }

 private:
  struct Own {
    std::size_t tensor;  //!< index into metas_
    std::size_t piece;   //!< index into pieces_[tensor]
  };
  static constexpr std::size_t kNoJob = static_cast<std::size_t>(-1);

  const ShardPiece& piece(std::size_t k) const { return pieces_[own_[k].tensor][own_[k].piece]; }
  std::uint64_t numel(std::size_t k) const {
    return piece(k).bytes() / dtype_size(metas_[own_[k].tensor].dtype);
  }
  bool low_byte(const TensorMeta& t) const {
    return opt_.reference == DeltaReference::low_byte && dtype_size(t.dtype) == 2;
  }
  void alloc_refs() {
    if (ref_metas_ == metas_ && ref_specs_ == specs_ && refs_.size() == own_.size()) return;
    refs_.clear();
    for (std::size_t k = 0; k < own_.size(); ++k) {
      const TensorMeta& t = metas_[own_[k].tensor];
      const std::uint64_t bytes = !piece(k).contiguous() ? 0
                                  : low_byte(t)          ? delta::low_byte_ref_bytes(numel(k))
                                                         : piece(k).bytes();
      refs_.push_back(codec_.alloc(bytes));
    }
    ref_metas_ = metas_;
    ref_specs_ = specs_;
  }
  void seed_ref(std::size_t k) {
    if constexpr (kLowByte) {
      if (low_byte(metas_[own_[k].tensor])) {
        codec_.seed_low_byte(Codec::data(refs_[k]), data_[k], numel(k));
        return;
      }
    }
    codec_.copy(Codec::data(refs_[k]), data_[k], piece(k).bytes());
  }
  //! The source's tensors, specs and pieces, and which pieces are this rank's.
  void layout() {
    metas_ = src_.metas();
    specs_ = src_.shard_specs();
    if (specs_.size() != metas_.size())
      throw config_error("shard_specs", detail::cat("has ", specs_.size(), " entries for ",
                                                    metas_.size(), " tensors"));
    pieces_.clear();
    own_.clear();
    for (std::size_t i = 0; i < metas_.size(); ++i) {
      pieces_.push_back(shard_pieces(metas_[i], i, specs_[i], m_));
      for (std::size_t k = 0; k < pieces_[i].size(); ++k)
        if (pieces_[i][k].rank == me_) own_.push_back({i, k});
    }
  }
  //! The source's pieces' addresses, in own_ order, checked against the declared tensors.
  void collect() {
    data_.assign(own_.size(), nullptr);
    auto&& range = src_.iterate();
    std::size_t k = 0;
    for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it, ++k) {
      auto&& item = *it;
      if (k >= own_.size())
        throw config_error("source", detail::cat("rank ", me_, " yields more than the ",
                                                 own_.size(), " pieces it holds"));
      const TensorMeta& want = metas_[own_[k].tensor];
      const TensorMeta& m = item.meta();
      if (m.name != want.name || m.dtype != want.dtype || m.shape != want.shape)
        throw config_error(want.name, detail::cat("rank ", me_, "'s source yields ", m.name,
                                                  " where its piece of ", want.name,
                                                  " was due"));
      data_[k] = item.data();
    }
    if (k != own_.size())
      throw config_error("source", detail::cat("rank ", me_, " yields ", k, " of the ",
                                               own_.size(), " pieces it holds"));
  }
  //! This rank's items of the prepared wire.
  void items() {
    items_.clear();
    std::vector<std::size_t> first(metas_.size(), own_.size());  // tensor -> its first own piece
    for (std::size_t k = own_.size(); k-- > 0;) first[own_[k].tensor] = k;
    for (std::size_t w = 0; w < wire_->metas.size(); ++w) {
      const auto& x = wire_->what[w];
      const TensorMeta* meta = &wire_->metas[w];
      switch (x.kind) {
        case detail::WireTensor::Kind::marker:
          if (me_ == 0) items_.push_back({meta, &marker_byte_});
          break;
        case detail::WireTensor::Kind::whole:
          for (std::size_t k = first[x.tensor]; k < own_.size() && own_[k].tensor == x.tensor; ++k)
            items_.push_back({meta, data_[k]});
          break;
        case detail::WireTensor::Kind::blob:
          for (std::size_t k = first[x.tensor]; k < own_.size() && own_[k].tensor == x.tensor; ++k)
            if (blob_at_[k] != kNoJob &&
                piece(k).offset / dtype_size(metas_[x.tensor].dtype) == x.elem_offset)
              items_.push_back({meta, Codec::data(blobs_) + blob_at_[k]});
          break;
        default:
          throw state_error("ShardedDeltaSource: a sparse pair in a delta round");
      }
    }
  }

  S& src_;
  int me_, m_;
  DeltaOptions opt_;
  Codec codec_;
  std::vector<TensorMeta> metas_, ref_metas_;
  std::vector<ShardSpec> specs_, ref_specs_;
  std::vector<std::vector<ShardPiece>> pieces_;
  std::vector<Own> own_;
  std::vector<const void*> data_;
  std::vector<typename Codec::Buffer> refs_;
  std::vector<std::size_t> job_of_;     //!< own piece -> its measure job (kNoJob: none)
  std::vector<std::uint64_t> sizes_;    //!< per job: the blob's size
  std::vector<std::uint64_t> blob_at_;  //!< own piece -> its blob in blobs_ (kNoJob: none)
  typename Codec::Buffer blobs_{};
  std::vector<SourceTensorRef> items_;
  detail::UpdateWireCache wire_cache_;
  std::shared_ptr<const detail::UpdateWire> wire_ = std::make_shared<const detail::UpdateWire>();
  DeltaUpdate delta_;
  DeltaPart mine_;
  DeltaStats stats_;
  detail::DeltaRounds round_;
  std::chrono::steady_clock::duration measure_time_{};
  static constexpr bool kMeasureUpdates = detail::codec_measure_updates<Codec>;
  static constexpr bool kLowByte = detail::codec_low_byte<Codec>;
  bool prepared_ = false, refs_hold_target_ = false, whole_round_ = false;
  static constexpr std::byte marker_byte_{0};
};

}  // namespace weightsync
