// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! CollectiveTransport: the Transport over a collective Communicator, driving the pipeline
//! (packed_broadcast_producer / _consumer, and sharded_broadcast_producer / _consumer for sharded
//! trainers); make_comm_backend makes a Backend of it. The built-ins over it register from their
//! own headers: "host" (host/backend.hpp) and "nccl" (nccl/backend.hpp).

#include <memory>
#include <span>
#include <string>
#include <utility>

#include "weightsync/concepts.hpp"
#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/group_info.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/sharded_broadcast.hpp"
#include "weightsync/workspace.hpp"

namespace weightsync {

//! A Transport over a collective Communicator: the pipeline (packed_broadcast_producer /
//! _consumer, sharded_broadcast_producer / _consumer) with a Workspace kept between transfers.
template <Communicator C>
class CollectiveTransport {
 public:
  using stream_type = typename C::stream_type;
  explicit CollectiveTransport(C comm)
      : comm_(std::move(comm)), ws_(detail::make_policy<detail::policy_t<C>>(comm_)) {}
  CollectiveTransport(CollectiveTransport&&) noexcept = default;
  CollectiveTransport& operator=(CollectiveTransport&&) = delete;

  int rank() const noexcept { return comm_.rank(); }
  int size() const noexcept { return comm_.size(); }
  bool healthy() const noexcept {
    if constexpr (requires { comm_.healthy(); })
      return comm_.healthy();
    else
      return !comm_.aborted();
  }
  void check() {
    if constexpr (MonitoredCommunicator<C>) comm_.check();
  }
  //! The first peer that left cleanly (its goodbye), -1 when none or not known.
  int departed_peer() noexcept {
    if constexpr (requires { comm_.departed_peer(); })
      return comm_.departed_peer();
    else
      return -1;
  }
  void abort(const std::string& why) noexcept {
    if constexpr (MonitoredCommunicator<C>) comm_.abort(why);
  }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     const TransferOptions& opt) {
    return packed_broadcast_producer(metas, items, comm_, 0, opt, ws_);
  }
  TransferStats receive(std::span<const TensorMeta> metas, const TransferOptions& opt,
                        const LoadOn<stream_type>& load) {
    return packed_broadcast_consumer(metas, comm_, 0, load, opt, ws_);
  }
  TransferStats send_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                            int trainers, AnyTensorRange& items, const TransferOptions& opt) {
    return sharded_broadcast_producer(metas, specs, items, comm_, trainers, opt, ws_);
  }
  TransferStats receive_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                               int trainers, const TransferOptions& opt,
                               const LoadOn<stream_type>& load) {
    return sharded_broadcast_consumer(metas, specs, comm_, trainers, load, opt, ws_);
  }
  C& communicator() noexcept { return comm_; }

 private:
  C comm_;
  workspace_for<C> ws_;  // declared after comm_: released before the communicator goes
};

//! A Backend named `name` over CollectiveTransport<Comm>, whose communicator `make` creates:
//! `make(const GroupInfo&, int rank, const EngineOptions&) -> Comm`.
template <class Comm, class Make>
std::unique_ptr<Backend> make_comm_backend(std::string name, Make make) {
  return make_transport_backend(
      std::move(name),
      [make = std::move(make)](const GroupInfo& info, int rank, const EngineOptions& o) {
        return CollectiveTransport<Comm>(make(info, rank, o));
      });
}

}  // namespace weightsync
