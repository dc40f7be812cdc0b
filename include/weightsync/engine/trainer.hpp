// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TrainerEngine, the training side: joins the transfer group (trainer_init) and sends a
//! WeightSource each round (send_weights). With one trainer rank in the group (trainer_world 1),
//! rank 0 sends and the other trainer ranks only iterate; with trainer_world = M > 1 every trainer
//! rank joins as rank trainer_rank and sends the pieces it holds (a ShardedWeightSource), without
//! gathering anything.

#include <memory>
#include <ranges>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/worker.hpp"
#include "weightsync/error.hpp"
#include "weightsync/info.hpp"
#include "weightsync/shard.hpp"

namespace weightsync {

//! What a trainer sends each round: the declared metadata, and a fresh iteration over the tensors
//! (each element a SourceTensor). On non-sender ranks the iteration still runs (materializing a
//! full tensor may be a collective of the trainer's own group) and its bytes are ignored.
template <class S>
concept WeightSource = requires(S& s) {
  //! the ordered metadata of this round
  { s.metas() } -> std::convertible_to<std::vector<TensorMeta>>;
  //! a fresh single pass over the tensors, in the declared order
  requires TensorIterator<decltype(s.iterate())>;
};

//! A WeightSource whose tensors are split over the trainer ranks: shard_specs() says how (one
//! ShardSpec per tensor, identical on every trainer rank), and iterate() yields, in declared
//! order, one item per piece this rank holds (shard_pieces with rank == this rank): the FULL
//! tensor's metadata and the piece's contiguous bytes (the local shard). Workers must be given
//! the same specs (TrainerEngine::update_info(metas, specs)); the handshake refuses others.
template <class S>
concept ShardedWeightSource = WeightSource<S> && requires(S& s) {
  { s.shard_specs() } -> std::convertible_to<std::vector<ShardSpec>>;
};

//! The training side. With trainer_world 1, rank 0 of the trainer's own group sends and the other
//! trainer ranks only iterate. With trainer_world = M > 1, trainer ranks 0..M-1 all join the
//! transfer group (as ranks 0..M-1; the workers start at rank_offset >= M) and every round is a
//! sharded transfer: each rank sends the pieces its ShardedWeightSource holds (a plain
//! WeightSource: rank 0 sends everything whole, the others only iterate, and still take part).
//! A ShardedWeightSource with trainer_world 1 is a sharded transfer with M = 1. Workers learn it
//! from the update info (update_info() sets shards / num_trainer_ranks).
class TrainerEngine {
 public:
  struct Options {
    EngineOptions engine;
    //! This process's rank in the trainer's own group: 0 sends; with trainer_world = M > 1,
    //! ranks 0..M-1 all send their shards.
    int trainer_rank = 0;
    //! M, the trainer ranks that join the transfer group (1: rank 0 alone).
    int trainer_world = 1;
  };

  TrainerEngine() : TrainerEngine(Options()) {}
  explicit TrainerEngine(Options o) : opt_(std::move(o)) {}
  TrainerEngine(const TrainerEngine&) = delete;
  TrainerEngine& operator=(const TrainerEngine&) = delete;
  ~TrainerEngine() { shutdown(); }

  //! Whether this rank joins the transfer group and sends (rank 0; every rank below M).
  bool is_sender() const { return opt_.trainer_rank == 0 || trainers() > 1; }
  //! M, the trainer ranks in the transfer group (Options::trainer_world).
  int trainers() const { return opt_.trainer_world; }

  //! Joins the transfer group as rank trainer_rank when trainer_world > 1, else as rank 0 on
  //! trainer rank 0 only (blocks until every rank has joined); non-sender ranks return at once.
  //! Run it while the workers' init_transfer_engine runs.
  //! @throws config_error for a trainer_rank outside 0..M-1, or a rank_offset below M.
  void trainer_init(const NcclInitInfo& info) {
    info.validate();
    const int m = opt_.trainer_world;
    if (m < 1) throw config_error("trainer_world", detail::cat("must be >= 1, got ", m));
    if (opt_.trainer_rank < 0 || (m > 1 && opt_.trainer_rank >= m))
      throw config_error("trainer_rank", detail::cat("must be in 0..", m - 1, " (trainer_world ", m,
                                                     "), got ", opt_.trainer_rank));
    if (info.rank_offset < m)
      throw config_error("rank_offset",
                         detail::cat("must be >= trainer_world (", m, "): ranks 0..", m - 1,
                                     " are the trainer's, got ", info.rank_offset));
    init_ = info;
    if (!is_sender()) return;
    auto b = BackendRegistry::global().make(opt_.engine.backend);
    b->init(info.group_info(), m > 1 ? opt_.trainer_rank : 0, opt_.engine);
    backend_ = std::move(b);
  }

  //! One round: the source's metadata, then its iteration, checked tensor by tensor.
  //! `overrides` may change packing for this round (as NcclUpdateInfo's optional fields do).
  //! A sharded transfer runs when M > 1 or the source is a ShardedWeightSource (workers then
  //! need the specs in their update info, see update_info(metas, specs)).
  template <WeightSource S>
  TransferStats send_weights(S& source, const NcclUpdateInfo& overrides = {}) {
    const std::vector<TensorMeta> metas = source.metas();
    std::vector<ShardSpec> specs;
    if constexpr (ShardedWeightSource<S>) specs = source.shard_specs();
    auto&& range = source.iterate();
    constexpr bool sharded_source = ShardedWeightSource<S>;
    // A plain source's bytes leave from rank 0 only; elsewhere the iteration runs and is dropped.
    const bool drop = !is_sender() || (!sharded_source && opt_.trainer_rank != 0);
    if (drop)
      for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it) (void)*it;
    if (!is_sender()) return {};
    if (!backend_) throw state_error("send_weights before trainer_init");
    auto t = WeightTransferEngine::transfer_options(init_, overrides, opt_.engine);
    if (!sharded_source) specs.assign(metas.size(), ShardSpec{});
    // Whole tensors from rank 0, unless the source is sharded or several trainer ranks send.
    const ShardLayout layout{specs, trainers()};
    const ShardLayout* shards = sharded_source || trainers() > 1 ? &layout : nullptr;
    if (drop) {  // a plain source on trainer rank > 0: no pieces here, but a part in every step
      AnyTensorRange none([](SourceTensorRef&) { return false; });
      return detail::with_progress(t, [&] { return backend_->send(metas, none, t, shards); });
    }
    auto it = std::ranges::begin(range);
    auto end = std::ranges::end(range);
    // The source's iterator moves on only when the next tensor is asked for (see AnyTensorRange).
    AnyTensorRange items([&, started = false](SourceTensorRef& out) mutable {
      if (started) ++it;
      started = true;
      if (it == end) return false;
      auto&& item = *it;
      out.meta_ = &static_cast<const TensorMeta&>(item.meta());
      out.data_ = item.data();
      return true;
    });
    return detail::with_progress(t, [&] { return backend_->send(metas, items, t, shards); });
  }

  //! The update info a worker needs for `metas` (names, dtype names, shapes), with this trainer's
  //! packing settings (and num_trainer_ranks when trainer_world > 1).
  NcclUpdateInfo update_info(const std::vector<TensorMeta>& metas) const {
    auto u = NcclUpdateInfo::from_metas(metas);
    u.packed = init_.packed;
    u.packed_buffer_size_bytes = init_.packed_buffer_size_bytes;
    u.packed_num_buffers = init_.packed_num_buffers;
    if (trainers() > 1) u.num_trainer_ranks = trainers();
    return u;
  }
  //! As above, with the shard specs (`shards`; a default spec, rank 0 sends it whole, as null).
  NcclUpdateInfo update_info(const std::vector<TensorMeta>& metas,
                             const std::vector<ShardSpec>& specs) const {
    auto u = update_info(metas);
    if (specs.size() != metas.size())
      throw config_error(
          "shards", detail::cat("has ", specs.size(), " entries for ", metas.size(), " tensors"));
    u.num_trainer_ranks = trainers();
    u.shards.emplace();
    for (const auto& s : specs)
      u.shards->push_back(s == ShardSpec{} ? std::nullopt : std::optional<ShardSpec>(s));
    return u;
  }

  bool healthy() const { return backend_ && backend_->healthy(); }
  void shutdown() noexcept {
    if (backend_) backend_->shutdown();
    backend_.reset();
  }

 private:
  Options opt_;
  std::unique_ptr<Backend> backend_;
  NcclInitInfo init_;
};

}  // namespace weightsync
