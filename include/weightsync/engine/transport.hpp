// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The Transport concept: one end of a transfer group, as the engines drive it. How the bytes move
//! is the model's: a collective broadcast (CollectiveTransport over a Communicator: "host",
//! "nccl") or a pull from mapped memory (the IPC transports: "ipc", "p2p"). TransportBackend makes
//! any model a Backend that the registry can hand out by name.

#include <concepts>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/detail/format.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/error.hpp"
#include "weightsync/shard.hpp"
#include "weightsync/tensor_meta.hpp"
#include "weightsync/transfer_options.hpp"

namespace weightsync {

//! One end of a transfer group that moves named tensors from the producing rank(s) to the others.
//!
//! Models: CollectiveTransport<HostCommunicator>, CollectiveTransport<NcclCommunicator>
//! (engine/comm_backend.hpp) and IpcTransport (cuda/ipc/transport.hpp). Opt in by providing the
//! members below; every wait inside them must be bounded by TransferOptions::timeout.
//! `stream_type` is the stream load_weights gets (TransportBackend types the engines' load for it:
//! LoadOn).
template <class T>
concept Transport = requires { typename T::stream_type; } &&
                    requires(T& t, const T& ct, std::span<const TensorMeta> metas,
                             AnyTensorRange& items, const TransferOptions& opt,
                             const LoadOn<typename T::stream_type>& load, const std::string& why) {
  //! this end's rank in 0..size()-1
  { ct.rank() } -> std::convertible_to<int>;
  //! ranks in the group
  { ct.size() } -> std::convertible_to<int>;
  //! false once it failed or was aborted: a new one is needed
  { ct.healthy() } -> std::convertible_to<bool>;
  //! throws if a peer is known to be gone or the group failed; non-blocking
  t.check();
  //! tears down so that every peer fails at once; never throws
  { t.abort(why) }
  noexcept;
  //! rank 0 offers `items` (one per entry of `metas`, in order) to every other rank
  { t.send(metas, items, opt) } -> std::same_as<TransferStats>;
  //! the other ranks receive them; views are handed to `load`, destinations are filled in place
  { t.receive(metas, opt, load) } -> std::same_as<TransferStats>;
};

//! A Transport that also moves tensors split over several trainer ranks (a refinement: a
//! transport without it still serves whole-tensor transfers; TransportBackend refuses a
//! ShardLayout for it with config_error("backend")).
template <class T>
concept ShardedTransport =
    Transport<T> && requires(T& t, std::span<const TensorMeta> metas,
                             std::span<const ShardSpec> specs, int trainers, AnyTensorRange& items,
                             const TransferOptions& opt,
                             const LoadOn<typename T::stream_type>& load) {
      //! trainer ranks 0..trainers-1 each offer the pieces `specs` give them
      { t.send_shards(metas, specs, trainers, items, opt) } -> std::same_as<TransferStats>;
      //! the other ranks receive every piece at its place
      { t.receive_shards(metas, specs, trainers, opt, load) } -> std::same_as<TransferStats>;
    };

//! A Backend over any Transport that `Make` creates from the group:
//! `Make(const GroupInfo&, int rank, const EngineOptions&) -> T` (it refuses what T cannot serve
//! before touching a device, and joins the group). `info` is validated and `rank` is in
//! 0..info.world_size-1 when `Make` is called.
template <Transport T, class Make>
class TransportBackend final : public Backend {
 public:
  TransportBackend(std::string name, Make make) : name_(std::move(name)), make_(std::move(make)) {}
  std::string name() const override { return name_; }
  void init(const GroupInfo& info, int rank, const EngineOptions& o) override {
    info.validate();
    if (rank < 0 || rank >= info.world_size)
      throw config_error("rank_offset", detail::cat("this worker's rank ", rank,
                                                    " is outside the world of ", info.world_size));
    shutdown();
    t_.emplace(make_(info, rank, o));
  }
  bool initialized() const noexcept override { return t_.has_value(); }
  bool healthy() const noexcept override { return t_ && t_->healthy(); }
  int rank() const noexcept override { return t_ ? t_->rank() : -1; }
  int world_size() const noexcept override { return t_ ? t_->size() : 0; }
  int departed_peer() noexcept override {
    if constexpr (requires(T& t) { t.departed_peer(); })
      return t_ ? t_->departed_peer() : -1;
    else
      return -1;
  }
  void check() override {
    if (!t_) return;
    try {
      t_->check();
    } catch (const std::exception& e) {
      t_->abort(e.what());
      throw;
    }
  }
  using Backend::receive;
  using Backend::send;
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items, TransferOptions opt,
                     const ShardLayout* shards) override {
    if (!shards) return ready().send(metas, items, opt);
    if constexpr (ShardedTransport<T>)
      return ready().send_shards(metas, shards->specs, shards->trainers, items, opt);
    else
      throw no_shards();
  }
  TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                        const AnyLoadWeights& load, const ShardLayout* shards) override {
    const LoadOn<typename T::stream_type> typed(load);  // the one place the load is typed
    if (!shards) return ready().receive(metas, opt, typed);
    if constexpr (ShardedTransport<T>)
      return ready().receive_shards(metas, shards->specs, shards->trainers, opt, typed);
    else
      throw no_shards();
  }
  void shutdown() noexcept override { t_.reset(); }
  //! The transport (initialized() must hold).
  T& transport() { return *t_; }

 private:
  config_error no_shards() const {
    return config_error("backend", name_ + " backend: sharded transfers are not implemented (its "
                                           "transport does not model ShardedTransport)");
  }
  T& ready() {
    if (!t_) throw state_error(name_ + " backend: not initialized");
    if (!t_->healthy())
      throw state_error(name_ +
                        " backend: the transport failed or was aborted by an earlier error; call "
                        "init_transfer_engine again");
    return *t_;
  }
  std::string name_;
  Make make_;
  std::optional<T> t_;
};

//! A Backend named `name` over the Transport that `make` creates (see TransportBackend).
template <class Make>
std::unique_ptr<Backend> make_transport_backend(std::string name, Make make) {
  using T = std::invoke_result_t<Make&, const GroupInfo&, int, const EngineOptions&>;
  return std::make_unique<TransportBackend<T, Make>>(std::move(name), std::move(make));
}

}  // namespace weightsync
