// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! TrainerEngine, the training side: joins the transfer group as rank 0 (trainer_init) and sends a
//! WeightSource each round (send_weights); other trainer ranks only iterate.

#include <memory>
#include <ranges>
#include <vector>

#include "weightsync/concepts.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/registry.hpp"
#include "weightsync/engine/worker.hpp"
#include "weightsync/error.hpp"
#include "weightsync/info.hpp"

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

//! The training side: rank 0 of the trainer's own group sends; the other trainer ranks only
//! iterate.
class TrainerEngine {
 public:
  struct Options {
    EngineOptions engine;
    int trainer_rank = 0;  //!< this process's rank in the trainer's own group; 0 sends
  };

  TrainerEngine() : TrainerEngine(Options()) {}
  explicit TrainerEngine(Options o) : opt_(std::move(o)) {}
  TrainerEngine(const TrainerEngine&) = delete;
  TrainerEngine& operator=(const TrainerEngine&) = delete;
  ~TrainerEngine() { shutdown(); }

  bool is_sender() const { return opt_.trainer_rank == 0; }

  //! Joins the transfer group as its rank 0 (blocks until every worker has joined); non-sender
  //! ranks return at once. Run it while the workers' init_transfer_engine runs.
  void trainer_init(const NcclInitInfo& info) {
    info.validate();
    if (!is_sender()) return;
    auto b = BackendRegistry::global().make(opt_.engine.backend);
    b->init(info, 0, opt_.engine);
    backend_ = std::move(b);
    init_ = info;
  }

  //! One round: the source's metadata, then its iteration, checked tensor by tensor.
  //! `overrides` may change packing for this round (as NcclUpdateInfo's optional fields do).
  template <WeightSource S>
  TransferStats send_weights(S& source, const NcclUpdateInfo& overrides = {}) {
    const std::vector<TensorMeta> metas = source.metas();
    auto&& range = source.iterate();
    if (!is_sender()) {
      for (auto it = std::ranges::begin(range); it != std::ranges::end(range); ++it) (void)*it;
      return {};
    }
    if (!backend_) throw state_error("send_weights before trainer_init");
    auto it = std::ranges::begin(range);
    auto end = std::ranges::end(range);
    AnyTensorRange items([&](SourceTensorRef& out) {
      if (it == end) return false;
      auto&& item = *it;
      out.meta_ = &static_cast<const TensorMeta&>(item.meta());
      out.data_ = item.data();
      ++it;
      return true;
    });
    return backend_->send(metas, items,
                          WeightTransferEngine::transfer_options(init_, overrides, opt_.engine));
  }

  //! The update info a worker needs for `metas` (names, dtype names, shapes), with this trainer's
  //! packing settings.
  NcclUpdateInfo update_info(const std::vector<TensorMeta>& metas) const {
    auto u = NcclUpdateInfo::from_metas(metas);
    u.packed = init_.packed;
    u.packed_buffer_size_bytes = init_.packed_buffer_size_bytes;
    u.packed_num_buffers = init_.packed_num_buffers;
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
