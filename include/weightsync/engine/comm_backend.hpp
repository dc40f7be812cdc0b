// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Backends over a collective Communicator: "host" (HostCommunicator, TCP) and "nccl"
//! (NcclCommunicator): CollectiveTransport, the Transport that drives the pipeline
//! (packed_broadcast_producer / _consumer, and sharded_broadcast_producer / _consumer for sharded
//! trainers).

#include "weightsync/config.hpp"

#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/engine/backend.hpp"
#include "weightsync/engine/transport.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/sharded_broadcast.hpp"
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/cuda/check.hpp"
#include "weightsync/nccl/communicator.hpp"
#include "weightsync/nccl/torch_bootstrap.hpp"
#include "weightsync/nccl/unique_id.hpp"
#endif

namespace weightsync {

//! A Transport over a collective Communicator: the pipeline (packed_broadcast_producer /
//! _consumer, sharded_broadcast_producer / _consumer) with a Workspace kept between transfers.
template <Communicator C>
class CollectiveTransport {
 public:
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
  void abort(const std::string& why) noexcept {
    if constexpr (MonitoredCommunicator<C>) comm_.abort(why);
  }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     const TransferOptions& opt) {
    return packed_broadcast_producer(metas, items, comm_, 0, opt, ws_);
  }
  TransferStats receive(std::span<const TensorMeta> metas, const TransferOptions& opt,
                        const AnyLoadWeights& load) {
    return packed_broadcast_consumer(metas, comm_, 0, typed(load), opt, ws_);
  }
  TransferStats send_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                            int trainers, AnyTensorRange& items, const TransferOptions& opt) {
    return sharded_broadcast_producer(metas, specs, items, comm_, trainers, opt, ws_);
  }
  TransferStats receive_shards(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                               int trainers, const TransferOptions& opt,
                               const AnyLoadWeights& load) {
    return sharded_broadcast_consumer(metas, specs, comm_, trainers, typed(load), opt, ws_);
  }
  C& communicator() noexcept { return comm_; }

 private:
  using stream_type = typename C::stream_type;
  //! load_weights on this communicator's stream type.
  static auto typed(const AnyLoadWeights& load) {
    return [&load](std::span<const TensorView> v, stream_type s) {
      if constexpr (std::is_pointer_v<stream_type>)
        load(v, static_cast<void*>(s));
      else
        load(v, nullptr);
    };
  }
  C comm_;
  workspace_for<C> ws_;  // declared after comm_: released before the communicator goes
};
static_assert(Transport<CollectiveTransport<HostCommunicator>>);
#if WEIGHTSYNC_HAS_NCCL
static_assert(Transport<CollectiveTransport<NcclCommunicator>>);
#endif

template <class Comm, class Make>
std::unique_ptr<Backend> make_comm_backend(std::string name, Make make) {
  return make_transport_backend(
      std::move(name),
      [make = std::move(make)](const NcclInitInfo& info, int rank, const EngineOptions& o) {
        return CollectiveTransport<Comm>(make(info, rank, o));
      });
}

//! The host backend: TCP, host memory, no GPU.
inline std::unique_ptr<Backend> make_host_backend() {
  return make_comm_backend<HostCommunicator>("host", [](const NcclInitInfo& info, int rank,
                                                        const EngineOptions& o) {
    return HostCommunicator::connect(detail::rendezvous_options(info, rank, o, "host"), o.timeout);
  });
}

#if WEIGHTSYNC_HAS_NCCL
//! The NCCL backend: TCP rendezvous (master_address/master_port) or a shared unique id
//! (nccl_unique_id_b64), one GPU per rank (EngineOptions::device).
inline std::unique_ptr<Backend> make_nccl_backend() {
  return make_comm_backend<NcclCommunicator>(
      "nccl", [](const NcclInitInfo& info, int rank, const EngineOptions& o) {
        NcclOptions n;
        n.device = o.device;
        n.timeout = o.timeout;
        // Blocking launches split a child communicator off the bounded parent: a collective that
        // vLLM's workers do not run, so vLLM's wire keeps non-blocking launches. Only this
        // library's peers set up every connection at init.
        const bool ours = o.protocol == Protocol::weightsync;
        n.blocking = o.nccl_blocking && ours;
        n.connect_all = ours;
        // The init info is checked first, then the GPU: at once, not after a rendezvous timeout.
        if (info.uses_unique_id()) {
          const auto id = NcclUniqueId::from_base64(*info.nccl_unique_id_b64);
          detail::require_cuda_device("nccl", o.device);
          return NcclCommunicator::init(id, rank, info.world_size, n);
        }
        const auto r = detail::rendezvous_options(info, rank, o, "nccl");
        detail::require_cuda_device("nccl", o.device);
        if (!ours)  // vLLM's TCP mode: its TCPStore and pickled unique id
          return vllm_tcp_communicator(r.address, r.port, rank, info.world_size, n);
        return NcclCommunicator::connect(r, n);
      });
}
#endif

#if WEIGHTSYNC_HAS_NCCL
//! The init info a trainer hands a vLLM server (POST /init_weight_transfer_engine): a fresh
//! ncclUniqueId in standard base64, so the server's workers and this trainer all enter
//! ncclCommInitRank together. Pair with EngineOptions{.backend = "nccl", .protocol =
//! Protocol::vllm} on the trainer.
inline NcclInitInfo vllm_init_info(int world_size, int rank_offset = 1, bool packed = true,
                                   std::int64_t buffer_size_bytes = kDefaultPackedBufferSizeBytes,
                                   int num_buffers = kDefaultPackedNumBuffers) {
  NcclInitInfo i;
  i.nccl_unique_id_b64 = NcclUniqueId::generate().to_base64();
  i.world_size = world_size;
  i.rank_offset = rank_offset;
  i.packed = packed;
  i.packed_buffer_size_bytes = buffer_size_bytes;
  i.packed_num_buffers = num_buffers;
  i.validate();
  return i;
}
#endif

}  // namespace weightsync
