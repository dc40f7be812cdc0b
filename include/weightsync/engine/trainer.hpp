// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TrainerEngine, the training side: joins the transfer group (trainer_init) and sends a
//! WeightSource each round (send_weights). With one trainer rank in the group (trainer_world 1),
//! rank 0 sends and the other trainer ranks only iterate; with trainer_world = M > 1 every trainer
//! rank joins as rank trainer_rank and sends the pieces it holds (a ShardedWeightSource), without
//! gathering anything.
//!
//! Like WeightTransferEngine, it takes neutral types (InitRequest, PackingOverrides,
//! UpdateRequest) and, through constrained templates, what an adapter converts to them
//! (engine/adapter.hpp; vLLM's NcclInitInfo and NcclUpdateInfo with <weightsync/vllm.hpp>).

#include <memory>
#include <optional>
#include <ranges>
#include <stop_token>
#include <utility>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/engine/adapter.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/init_request.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/update_request.hpp"
#include "weightsync/engine/worker.hpp"
#include "weightsync/error.hpp"
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
//! the same specs (TrainerEngine::update_request(metas, specs), or update_info for vLLM's JSON);
//! the handshake refuses others.
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
//! from the update (update_request() / update_info() set the shards and trainer ranks).
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
  //! Run it while the workers' init_transfer_engine runs (http::join_servers does both, and
  //! reports a server that fails or cannot be reached at once). A stop requested on `stop` ends
  //! rank 0's rendezvous early (EngineOptions::stop).
  //! @throws config_error for a trainer_rank outside 0..M-1, or a rank_offset below M.
  void trainer_init(const InitRequest& info, std::stop_token stop = {}) {
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
    packing_ = info.packing;
    if (!is_sender()) return;
    auto b = BackendRegistry::global().make(opt_.engine.backend);
    if (stop.stop_possible()) {
      EngineOptions o = opt_.engine;
      o.stop = std::move(stop);
      b->init(info.group, m > 1 ? opt_.trainer_rank : 0, o);
    } else {
      b->init(info.group, m > 1 ? opt_.trainer_rank : 0, opt_.engine);
    }
    backend_ = std::move(b);
  }
  //! An adapter's init (engine/adapter.hpp): vLLM's NcclInitInfo with <weightsync/vllm.hpp>.
  template <InitInfo I>
  void trainer_init(const I& info, std::stop_token stop = {}) {
    trainer_init(to_init_request(info, InitContext{}), std::move(stop));
  }

  //! One round: the source's metadata, then its iteration, checked tensor by tensor.
  //! `overrides` may change packing for this round (as an update's PackingOverrides do).
  //! A sharded transfer runs when M > 1 or the source is a ShardedWeightSource (workers then
  //! need the specs in their update, see update_request(metas, specs)).
  template <WeightSource S>
  TransferStats send_weights(S& source, const PackingOverrides& overrides = {}) {
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
    auto t = WeightTransferEngine::transfer_options(packing_, overrides, opt_.engine);
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

  //! An adapter's update as the packing of this round (its PackingOverrides): vLLM's
  //! NcclUpdateInfo with <weightsync/vllm.hpp>.
  template <WeightSource S, UpdateInfo U>
  TransferStats send_weights(S& source, const U& update) {
    return send_weights(source, to_update_request(update, UpdateContext{}).packing);
  }

  //! The update a worker needs for `metas`, with this trainer's packing settings (and, when
  //! trainer_world > 1, a sharded transfer from M ranks, every tensor whole from rank 0).
  UpdateRequest update_request(const std::vector<TensorMeta>& metas) const {
    UpdateRequest u;
    u.metas = metas;
    u.packing = {packing_.packed, packing_.buffer_size_bytes, packing_.num_buffers};
    if (trainers() > 1) {
      u.sharded = true;
      u.trainer_ranks = trainers();
    }
    return u;
  }
  //! As above, a sharded transfer with the shard specs.
  //! @throws config_error("shards") when there is not one spec per tensor.
  UpdateRequest update_request(const std::vector<TensorMeta>& metas,
                               const std::vector<ShardSpec>& specs) const {
    auto u = update_request(metas);
    if (specs.size() != metas.size())
      throw config_error(
          "shards", detail::cat("has ", specs.size(), " entries for ", metas.size(), " tensors"));
    u.sharded = true;
    u.trainer_ranks = trainers();
    u.shards = specs;
    return u;
  }
  //! The update info a worker needs, in an adapter's terms: update_request(args...) converted by
  //! the adapter's `to_update_info` (found by ADL): vLLM's NcclUpdateInfo (names, dtype names,
  //! shapes, packing, num_trainer_ranks, shards) with <weightsync/vllm.hpp>.
  template <class... Args>
  auto update_info(const Args&... args) const -> decltype(to_update_info(
      std::declval<const typename detail::dependent_type<UpdateRequest, Args...>::type&>())) {
    return to_update_info(update_request(args...));
  }

  bool healthy() const { return backend_ && backend_->healthy(); }
  void shutdown() noexcept {
    if (backend_) backend_->shutdown();
    backend_.reset();
  }

 private:
  Options opt_;
  std::unique_ptr<Backend> backend_;
  Packing packing_;  //!< the init's
};

}  // namespace weightsync
