// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Backends over a collective Communicator: "host" (HostCommunicator, TCP) and "nccl"
//! (NcclCommunicator), both driving the pipeline (packed_broadcast_producer / _consumer, and
//! sharded_broadcast_producer / _consumer for sharded trainers).

#include "weightsync/config.hpp"

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "weightsync/engine/backend.hpp"
#include "weightsync/host/communicator.hpp"
#include "weightsync/packed_broadcast.hpp"
#include "weightsync/sharded_broadcast.hpp"
#if WEIGHTSYNC_HAS_NCCL
#include "weightsync/nccl/communicator.hpp"
#include "weightsync/nccl/torch_bootstrap.hpp"
#include "weightsync/nccl/unique_id.hpp"
#endif

namespace weightsync {

//! A Backend over any communicator whose Make functor creates it from the init info.
template <class Comm, class Make>
class CommBackend final : public Backend {
 public:
  CommBackend(std::string name, Make make) : name_(std::move(name)), make_(std::move(make)) {}
  std::string name() const override { return name_; }
  void init(const NcclInitInfo& info, int rank, const EngineOptions& o) override {
    info.validate();
    if (rank < 0 || rank >= info.world_size)
      throw config_error("rank_offset", detail::cat("this worker's rank ", rank,
                                                    " is outside the world of ", info.world_size));
    shutdown();
    comm_.emplace(make_(info, rank, o));
    ws_.emplace(detail::make_policy<detail::policy_t<Comm>>(*comm_));
  }
  bool initialized() const noexcept override { return comm_.has_value(); }
  bool healthy() const noexcept override {
    if (!comm_) return false;
    if constexpr (requires { comm_->healthy(); })
      return comm_->healthy();
    else
      return !comm_->aborted();
  }
  int rank() const noexcept override { return comm_ ? comm_->rank() : -1; }
  int world_size() const noexcept override { return comm_ ? comm_->size() : 0; }
  void check() override {
    if (!comm_) return;
    if constexpr (MonitoredCommunicator<Comm>) {
      try {
        comm_->check();
      } catch (const std::exception& e) {
        comm_->abort(e.what());
        throw;
      }
    }
  }
  TransferStats receive(std::span<const TensorMeta> metas, TransferOptions opt,
                        const AnyLoadWeights& load) override {
    ready();
    return packed_broadcast_consumer(
        metas, *comm_, 0,
        [&](std::span<const TensorView> v, typename Comm::stream_type s) { load(v, to_void(s)); },
        opt, *ws_);
  }
  TransferStats send(std::span<const TensorMeta> metas, AnyTensorRange& items,
                     TransferOptions opt) override {
    ready();
    return packed_broadcast_producer(metas, items, *comm_, 0, opt, *ws_);
  }
  TransferStats receive_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                                int trainers, TransferOptions opt,
                                const AnyLoadWeights& load) override {
    ready();
    return sharded_broadcast_consumer(
        metas, specs, *comm_, trainers,
        [&](std::span<const TensorView> v, typename Comm::stream_type s) { load(v, to_void(s)); },
        opt, *ws_);
  }
  TransferStats send_sharded(std::span<const TensorMeta> metas, std::span<const ShardSpec> specs,
                             int trainers, AnyTensorRange& items, TransferOptions opt) override {
    ready();
    return sharded_broadcast_producer(metas, specs, items, *comm_, trainers, opt, *ws_);
  }
  void shutdown() noexcept override {
    ws_.reset();
    comm_.reset();
  }
  Comm& communicator() { return *comm_; }

 private:
  static void* to_void(typename Comm::stream_type s) {
    if constexpr (std::is_pointer_v<typename Comm::stream_type>)
      return static_cast<void*>(s);
    else
      return nullptr;
  }
  void ready() const {
    if (!comm_) throw state_error(name_ + " backend: not initialized");
    if (!healthy())
      throw state_error(name_ +
                        " backend: the communicator failed or was aborted by an earlier "
                        "error; call init_transfer_engine again");
  }
  std::string name_;
  Make make_;
  std::optional<Comm> comm_;
  std::optional<workspace_for<Comm>> ws_;
};

template <class Comm, class Make>
std::unique_ptr<Backend> make_comm_backend(std::string name, Make make) {
  return std::make_unique<CommBackend<Comm, Make>>(std::move(name), std::move(make));
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
        if (info.uses_unique_id())
          return NcclCommunicator::init(NcclUniqueId::from_base64(*info.nccl_unique_id_b64), rank,
                                        info.world_size, n);
        const auto r = detail::rendezvous_options(info, rank, o, "nccl");
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
